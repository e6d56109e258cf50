// Device pieces of DeepSeek-V4's hyper-connection pre-step shared by its two forms (v4_hc_kernels.cu: mixes,
// then the finish; v4_hc_fused_kernels.cu: one cluster launch): the gate sigmoid, the post gates and the
// Sinkhorn-normalised combination matrix of one token from its mixes, for n = N <= 5 streams with the whole
// n x n matrix in each lane's registers. Weights are a separate load, so kernels issue it before their PDL
// wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::hc {

__device__ __forceinline__ float sigmoidf(float v) {
  return 1.0f / (1.0f + expf(-v));
}

// Scales each column (kRows = false) or row of the N x N matrix c by the reciprocal of its sum + eps, the sum
// in index order. The CPU, as torch, divides. A correctly rounded reciprocal (__frcp_rn) or divide is a
// multi-instruction sequence: with four __frcp_rn a round the 2 iters - 1 rounds took 8.2 us of V4's hc_pre
// (DISABLED_BenchV4Decode, H100, 2026-12-06: 14.0 us at 20 iterations, 5.8 at 1; the earlier form, one IEEE
// divide a lane after shuffles, ~8 us of the finish's 9.4). The hardware reciprocal (MUFU, within 2 ulp) and
// a multiply keep a round to a sum, a reciprocal and a product; the result stays within the reference tests'
// 1e-5 of the CPU's.
template <bool kRows, int N, typename Matrix>
__device__ __forceinline__ void sinkhorn_scale(Matrix& c, float eps) {
  float inv[N];
#pragma unroll
  for (int a = 0; a < N; ++a) {
    float s = 0.0f;
#pragma unroll
    for (int b = 0; b < N; ++b) s += kRows ? c[a][b] : c[b][a];
    inv[a] = __fdividef(1.0f, s + eps);
  }
#pragma unroll
  for (int a = 0; a < N; ++a)
#pragma unroll
    for (int b = 0; b < N; ++b) {
      if (kRows) {
        c[a][b] *= inv[a];
      } else {
        c[b][a] *= inv[a];
      }
    }
}

// The weights post_comb uses (base [(2 + N) N], scale [3]): lane j < N's post bias, the post and comb scales
// and the comb biases.
template <int N>
struct PostCombWeights {
  float bp = 0.0f, sp = 0.0f, sc = 0.0f;
  float bc[N][N];

  __device__ __forceinline__ void load(const float* base, const float* scale) {
    const int lane = threadIdx.x % 32;
    bp = lane < N ? base[N + lane] : 0.0f;
    sp = scale[1];
    sc = scale[2];
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int k = 0; k < N; ++k) bc[r][k] = base[2 * N + r * N + k];
  }
};

// post [N] and comb [N, N] of one token from its mixes mt [(2 + N) N] (global or shared memory), by one
// warp, every lane computing the whole matrix (no shuffles or shared memory in the chain): the post gates,
// each row's softmax + eps, then Sinkhorn-Knopp (columns first, then iters - 1 row/column rounds). Lane j < N
// stores post[j], lane 0 comb.
template <int N>
__device__ void post_comb(const PostCombWeights<N>& w, const float* mt, float* post_t, float* comb_t,
                          int64_t iters, float hc_eps) {
  const int lane = threadIdx.x % 32;
  const float mp = lane < N ? mt[N + lane] : 0.0f;
  float c[N][N];
#pragma unroll
  for (int r = 0; r < N; ++r)
#pragma unroll
    for (int k = 0; k < N; ++k) c[r][k] = mt[2 * N + r * N + k] * w.sc + w.bc[r][k];
  if (lane < N) post_t[lane] = 2.0f * sigmoidf(mp * w.sp + w.bp);
#pragma unroll
  for (int r = 0; r < N; ++r) {  // row-wise softmax, then + eps
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; ++k) mx = fmaxf(mx, c[r][k]);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) sum += (c[r][k] = expf(c[r][k] - mx));
#pragma unroll
    for (int k = 0; k < N; ++k) c[r][k] = c[r][k] / sum + hc_eps;
  }
  sinkhorn_scale<false, N>(c, hc_eps);
  for (int64_t i = 0; i + 1 < iters; ++i) {
    sinkhorn_scale<true, N>(c, hc_eps);
    sinkhorn_scale<false, N>(c, hc_eps);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int k = 0; k < N; ++k) comb_t[r * N + k] = c[r][k];
  }
}

}  // namespace dsinfer::cuda::hc
