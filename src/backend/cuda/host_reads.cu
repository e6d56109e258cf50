// Small host-to-device transfers done by kernels that read page-locked host memory over the bus (mapped under
// unified addressing) instead of by the copy engine. Between two kernels on the stream, each copy-engine
// transfer costs far more than its bytes: on the H200 a decode step's boundary showed 7-9 us of idle stream
// on each side of the results' and the next plan's 1.6-2.4 us copies (twenty-seventh session's trace,
// docs/benchmarks.md). A kernel's reads wait only for the bus round trip.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/feed_device.cuh"
#include "backend/cuda/host_reads.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kCopyThreads = 256;

// dst[0, bytes) = src[0, bytes): 16-byte pieces when both are 16-byte aligned, else bytes; all of a
// thread's loads of a round before its stores; the first round's loads before the PDL wait (the host wrote
// src before the launch), every store after it. Then the feed, if any (HostReadFeed).
__global__ void copy_from_host_kernel(char* __restrict__ dst, const char* __restrict__ src, int64_t bytes,
                                      bool vec16, HostReadFeed feed) {
  bool waited = false;
  auto wait_once = [&] {
    if (!waited) {
      pdl_wait();
      pdl_trigger();
      waited = true;
    }
  };
  if (vec16) {
    const int64_t n16 = bytes / 16;
    move_pieces<kCopyThreads, 4>(
        n16, [&](int64_t c) { return reinterpret_cast<const uint4*>(src)[c]; },
        [&](int64_t c, const uint4& v) {
          wait_once();
          reinterpret_cast<uint4*>(dst)[c] = v;
        });
    wait_once();
    for (int64_t i = n16 * 16 + threadIdx.x; i < bytes; i += kCopyThreads) dst[i] = src[i];
  } else {
    wait_once();
    for (int64_t i = threadIdx.x; i < bytes; i += kCopyThreads) dst[i] = src[i];
  }
  if (feed.tokens == 0) return;
  __syncthreads();  // the copied prev rows are visible to every thread of the block
  int32_t* token_ids = reinterpret_cast<int32_t*>(dst + feed.token_ids_at);
  const int32_t* prev_rows = reinterpret_cast<const int32_t*>(dst + feed.prev_rows_at);
  for (int32_t t = static_cast<int32_t>(threadIdx.x); t < feed.tokens; t += kCopyThreads)
    feed_sampled_token(token_ids, prev_rows, t, feed.results, feed.rows, feed.vocab);
}

}  // namespace

bool host_reads_enabled() {
  static const bool on = env_switch("DSINFER_CUDA_HOST_READS", true);
  return on;
}

void copy_from_host_by_kernel(void* dst, const void* pinned_src, size_t bytes, const HostReadFeed* feed) {
  if (bytes == 0) return;
  DSI_CHECK(bytes <= kHostReadMaxBytes, "copy_from_host_by_kernel: ", bytes, " bytes, at most ",
            kHostReadMaxBytes);
  const bool vec16 = aligned16(dst) && aligned16(pinned_src);
  if (feed) {
    DSI_CHECK(feed->token_ids_at + 4 * static_cast<size_t>(feed->tokens) <= bytes &&
                  feed->prev_rows_at + 4 * static_cast<size_t>(feed->tokens) <= bytes,
              "copy_from_host_by_kernel: the feed's arrays lie outside the ", bytes, " bytes copied");
  }
  launch_pdl(copy_from_host_kernel, 1, kCopyThreads, 0, static_cast<char*>(dst),
             static_cast<const char*>(pinned_src), static_cast<int64_t>(bytes), vec16,
             feed ? *feed : HostReadFeed{});
  check_launch("copy_from_host");
}

}  // namespace dsinfer::cuda
