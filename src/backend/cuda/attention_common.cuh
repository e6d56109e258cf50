// Device helpers shared by the attention and cache-write kernels (.cu only): bf16 conversion, the paged
// slot of a position, 16-byte cp.async copies, launch checks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "core/error.h"

namespace dsinfer::cuda::attn {

using cuda::check_launch;

// Cache element <-> float32.
__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Cache slot of position `pos` of sequence `seq`.
__device__ __forceinline__ int64_t slot_of(const DevicePlanView& plan, int32_t seq, int64_t pos) {
  const int64_t bs = plan.block_size;
  return static_cast<int64_t>(plan.block_table[plan.block_table_indptr[seq] + pos / bs]) * bs + pos % bs;
}

// 16-byte async global -> shared copy; bytes 0 fills the destination with zeros (src is not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace dsinfer::cuda::attn
