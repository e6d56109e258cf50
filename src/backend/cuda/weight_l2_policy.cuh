// The L2 eviction priority of weight reads in the decode kernels that stream weights (the GEMVs of
// gemv_device.cuh / gemv_persistent.cuh, the head GEMVs of head_gemv_device.cuh / head_gemv_n.cuh). Weights
// are read once a step, so with evict-first they replace one another in L2 rather than the small data other
// kernels read again. Measured on the H200 (docs/benchmarks.md, thirty-first session), the gain is in the
// weight streams themselves (the 8B's LM head at 4.44 TB/s), not yet understood; the attention barely moved.
// The host's switch is gemv_weights_evict_first (gemv_kernels.h). Off: reads without a cache hint (L2's
// default; an explicit evict-normal hint measured ~10% slower on the 8B).
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
