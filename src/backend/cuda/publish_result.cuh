// A sampling or scoring row's finished result copied into page-locked host memory by the block that computed
// it, so that no copy-engine transfer follows the kernel (sampling_kernels.cu, scoring_kernels.cu).
#pragma once
#include <cstdint>

#include "backend/cuda/sampling_kernels.h"

namespace dsinfer::cuda {

// Row r's result (written to `out` by the block's threads) into host_results[r]; nothing when host_results is
// null. Every thread of the block calls it.
__device__ __forceinline__ void publish_result(const SampleRowResult& out, SampleRowResult* host_results,
                                               int64_t r) {
  if (host_results == nullptr) return;
  __syncthreads();  // the block's writes to `out` are visible to its threads
  constexpr int kWords = static_cast<int>(sizeof(SampleRowResult) / 4);
  const int32_t* from = reinterpret_cast<const int32_t*>(&out);
  int32_t* to = reinterpret_cast<int32_t*>(host_results + r);
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) to[i] = from[i];
}

}  // namespace dsinfer::cuda
