// measure_copy_gbs (copy_bandwidth.h).
#include <cuda_runtime.h>

#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/timing.h"
#include "core/error.h"

namespace dsinfer::cuda {

double measure_copy_gbs(int64_t bytes, int reps) {
  DSI_CHECK(bytes > 0 && reps > 0, "copy bandwidth: ", bytes, " bytes, ", reps, " repetitions");
  // cudaMalloc / cudaFree, not the caching allocator: the memory goes back to the device, so a memory plan
  // made afterwards sees it free.
  void* src = nullptr;
  void* dst = nullptr;
  if (cudaMalloc(&src, static_cast<size_t>(bytes)) != cudaSuccess ||
      cudaMalloc(&dst, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();  // the failed allocation is not a sticky error
    if (src) cudaFree(src);
    return 0.0;
  }
  double ms = 0.0;
  try {
    check_cuda(cudaMemsetAsync(src, 1, static_cast<size_t>(bytes), stream()), "copy bandwidth: memset");
    ms = time_stream_ms(
        [&] {
          check_cuda(
              cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream()),
              "copy bandwidth: copy");
        },
        reps);
  } catch (...) {
    cudaFree(dst);
    cudaFree(src);
    throw;
  }
  cudaFree(dst);
  cudaFree(src);
  return ms > 0.0 ? 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace dsinfer::cuda
