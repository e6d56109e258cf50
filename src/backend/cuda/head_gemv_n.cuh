// The w x tile of the decode head GEMV (w [H, B, A] bf16, y[t, h] = w[h] x[t, h]), shared by
// head_gemv_n_tile_kernel (head_gemv_kernels.cu) and the MLA merge + W_UV kernel (mla_uv_kernels.cu), so
// both sum every output in the same order (same bits). A block of 8 warps takes rows 8 R tile .. 8 R tile + 8
// R
// - 1 of one head; warp i rows 8 R tile + R i .. + R - 1, lane l the 16-byte chunks l and l + 32 of each
// 512-input pass of A (the next pass's weights loaded while one is summed), x of the NT tokens staged in
// shared memory; each row's 32 lane sums are added by a warp butterfly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/head_gemv_device.cuh"

namespace dsinfer::cuda::detail {

inline constexpr int kHeadGemvThreads = head_gemv::kThreads;
inline constexpr int kHeadGemvWarps = head_gemv::kWarps;
inline constexpr int kHeadGemvPassInputs = head_gemv::kPassInputs;  // w x: inputs of A loaded at once per row
using head_gemv::load_weights16;
using head_gemv::unpack8;

// One thread's part of the w x tile (tile `tile` of head h). Construct it (it puts the first pass's weights
// in flight: they depend on no earlier kernel), stage x, then run(). A % 8 == 0, w 16-byte aligned.
// evict_first: the weights' L2 policy (weight_l2_policy.cuh).
template <int NT, int R>
struct HeadGemvN {
  static constexpr int kChunks = kHeadGemvPassInputs / 256;  // 16-byte chunks per lane and row of a pass
  const uint16_t* wr[R];
  uint4 wv[R][kChunks];
  int lane, b0, A, B;
  WeightL2 l2;

  __device__ __forceinline__ HeadGemvN(const uint16_t* w, int h, int tile, int A_, int B_, bool evict_first)
      : A(A_), B(B_), l2(weight_l2(evict_first)) {
    const int warp = threadIdx.x / 32;
    lane = threadIdx.x % 32;
    b0 = (tile * kHeadGemvWarps + warp) * R;
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = w + (static_cast<int64_t>(h) * B + min(b0 + r, B - 1)) * A;
    load_pass(wv, 0);
  }

  __device__ __forceinline__ void load_pass(uint4 (&dst)[R][kChunks], int p0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int kk = p0 + (k * 32 + lane) * 8;
        dst[r][k] = b0 + r < B && kk < A ? load_weights16(wr[r] + kk, l2) : make_uint4(0, 0, 0, 0);
      }
  }

  // y[t, h, b] for t < T (T <= NT) and this thread's rows b, from xs [NT][A] in shared memory (rows t >= T
  // zero).
  __device__ __forceinline__ void run(const float* xs, float* y, int T, int H, int h) {
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    for (int p0 = 0; p0 < A; p0 += kHeadGemvPassInputs) {
      uint4 next[R][kChunks];  // the next pass's weights in flight while this one is summed
      if (p0 + kHeadGemvPassInputs < A) load_pass(next, p0 + kHeadGemvPassInputs);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int kk = p0 + (k * 32 + lane) * 8;
        if (kk < A) {
          float wf[R][8];
#pragma unroll
          for (int r = 0; r < R; ++r) unpack8(wv[r][k], wf[r]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            const float4 x0 = *reinterpret_cast<const float4*>(xs + t * A + kk);
            const float4 x1 = *reinterpret_cast<const float4*>(xs + t * A + kk + 4);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[r][t] += wf[r][i] * xv[i];
          }
        }
      }
      if (p0 + kHeadGemvPassInputs < A) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int k = 0; k < kChunks; ++k) wv[r][k] = next[r][k];
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = acc[r][t];
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == (r * NT + t) % 32 && t < T && b0 + r < B)
          y[(static_cast<int64_t>(t) * H + h) * B + b0 + r] = v;
      }
  }
};

}  // namespace dsinfer::cuda::detail
