// Small host-to-device transfers done by kernels that read page-locked host memory over the bus (mapped under
// unified addressing) instead of by the copy engine. Between two kernels on the stream, each copy-engine
// transfer costs far more than its bytes: on the H200 a decode step's boundary showed 7-9 us of idle stream
// on each side of the results' and the next plan's 1.6-2.4 us copies (twenty-seventh session's trace,
// docs/benchmarks.md). A kernel's reads wait only for the bus round trip.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/host_reads.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kCopyThreads = 256;

// dst[0, bytes) = src[0, bytes): 16-byte pieces when both are 16-byte aligned, else bytes; all of a
// thread's loads before its stores.
__global__ void copy_from_host_kernel(char* __restrict__ dst, const char* __restrict__ src, int64_t bytes,
                                      bool vec16) {
  if (vec16) {
    const int64_t n16 = bytes / 16;
    move_pieces<kCopyThreads, 4>(
        n16, [&](int64_t c) { return reinterpret_cast<const uint4*>(src)[c]; },
        [&](int64_t c, const uint4& v) { reinterpret_cast<uint4*>(dst)[c] = v; });
    for (int64_t i = n16 * 16 + threadIdx.x; i < bytes; i += kCopyThreads) dst[i] = src[i];
    return;
  }
  for (int64_t i = threadIdx.x; i < bytes; i += kCopyThreads) dst[i] = src[i];
}

}  // namespace

bool host_reads_enabled() {
  static const bool on = env_switch("DSINFER_CUDA_HOST_READS", true);
  return on;
}

void copy_from_host_by_kernel(void* dst, const void* pinned_src, size_t bytes) {
  if (bytes == 0) return;
  DSI_CHECK(bytes <= kHostReadMaxBytes, "copy_from_host_by_kernel: ", bytes, " bytes, at most ",
            kHostReadMaxBytes);
  const bool vec16 = aligned16(dst) && aligned16(pinned_src);
  copy_from_host_kernel<<<1, kCopyThreads, 0, stream()>>>(
      static_cast<char*>(dst), static_cast<const char*>(pinned_src), static_cast<int64_t>(bytes), vec16);
  check_launch("copy_from_host");
}

}  // namespace dsinfer::cuda
