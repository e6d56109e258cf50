// Launcher of the fused MLA decode prepare kernel (CUDA-header free): the W_UK absorption of the query (the
// w^T x head GEMV of head_matmul) and the MLA cache write (launch_mla_rope_write_kv) in one launch.
// Semantics of Backend::mla_prepare's default (mla_rope_write_kv, then head_matmul(q_nope, w_uk, true)).
#pragma once
#include <cstdint>

#include "backend/cuda/mla_write_kernels.h"

namespace dsinfer::cuda {

struct MlaPrepareArgs {
  const float* q_nope = nullptr;   // [T, H, A] f32 (write.T, write.H)
  const uint16_t* w_uk = nullptr;  // [H, A, B] bf16
  float* q_lat = nullptr;          // [T, H, B] f32: q_lat[t, h] = w_uk[h]^T q_nope[t, h]
  int64_t A = 0, B = 0;
  MlaWriteArgs write;  // the cache write (its T and H are the GEMV's too)
};

// Whether launch_mla_prepare takes `a` (q_lat is not looked at): launch_head_gemv_tiled(q_nope, w_uk, q_lat,
// T, H, A, B, true) would run its default tile of 8 column chunks (1 <= T, next_pow2(T) <= 8, B % 8 == 0,
// w_uk 16-byte aligned, x and the partial sums in 48 KiB; DSINFER_CUDA_HEAD_GEMV not asking for another
// tile) and launch_mla_rope_write_kv takes the write.
bool mla_prepare_supported(const MlaPrepareArgs& a);
// Both in one launch (throws where !mla_prepare_supported(a)): blocks [0, H * ceil(B / 64)) are that GEMV's
// blocks, the next T the write's blocks (one per token), running the same code as the separate kernels
// (head_gemv_device.cuh, mla_write_device.cuh), so q_lat, q_pe, k_pe and the cache rows get the same bits.
void launch_mla_prepare(const MlaPrepareArgs& a);

}  // namespace dsinfer::cuda
