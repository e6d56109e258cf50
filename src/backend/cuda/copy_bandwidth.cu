// measure_copy_gbs (copy_bandwidth.h).
#include <cuda_runtime.h>

#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/timing.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

// A cudaMalloc'd buffer, cudaFree'd when it goes (null when the allocation failed, without a sticky error).
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      ptr = nullptr;
      cudaGetLastError();
    }
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

double measure_copy_gbs(int64_t bytes, int reps) {
  DSI_CHECK(bytes > 0 && reps > 0, "copy bandwidth: ", bytes, " bytes, ", reps, " repetitions");
  // cudaMalloc / cudaFree, not the caching allocator: the memory goes back to the device, so a memory plan
  // made afterwards sees it free.
  const size_t n = static_cast<size_t>(bytes);
  const DeviceBuffer src(n);
  if (!src.ptr) return 0.0;
  const DeviceBuffer dst(n);
  if (!dst.ptr) return 0.0;
  check_cuda(cudaMemsetAsync(src.ptr, 1, n, stream()), "copy bandwidth: memset");
  const double ms = time_stream_ms(
      [&] {
        check_cuda(cudaMemcpyAsync(dst.ptr, src.ptr, n, cudaMemcpyDeviceToDevice, stream()),
                   "copy bandwidth: copy");
      },
      reps);
  return ms > 0.0 ? 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace dsinfer::cuda
