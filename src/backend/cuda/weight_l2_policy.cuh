// The L2 eviction priority of weight reads in the decode kernels that stream weights (the GEMVs of
// gemv_device.cuh / gemv_persistent.cuh, the head GEMVs of head_gemv_device.cuh / head_gemv_n.cuh): weights
// are read once a step, so with evict-first they leave L2 before the small data that latency-bound kernels
// read again (KV cache rows, the step plan, activations). The host's switch is gemv_weights_evict_first
// (gemv_kernels.h). Off: reads without a cache hint (L2's default; an explicit evict-normal hint measured
// ~10% slower on the 8B, thirty-first session).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct WeightL2 {
  uint64_t policy;  // createpolicy's, when evict_first
  bool evict_first;
};

__device__ __forceinline__ WeightL2 weight_l2(bool evict_first) {
  WeightL2 l2{0, evict_first};
  if (evict_first) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(l2.policy));
  return l2;
}

}  // namespace dsinfer::cuda
