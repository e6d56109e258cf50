// Helpers every kernel file shares (.cu only): the launch check and the bf16 tensor-core MMA
// (mma.sync m16n8k16, bf16 inputs, fp32 accumulate; sm_80 and newer).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace dsinfer::cuda {

// Throws when the last kernel launch failed (bad configuration, too much shared memory, ...).
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel ", what, " failed to launch: ", cudaGetErrorString(err));
}

// c[4] += A (16x16 bf16, row-major fragments a[4]) * B (16x8 bf16, column fragments b[2]).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

}  // namespace dsinfer::cuda
