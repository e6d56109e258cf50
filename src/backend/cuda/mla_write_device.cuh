// The block-level code of the MLA cache write (one token per block of 256 threads: the kv_a_norm RMSNorm of
// the latent, rope of k_pe and every head's q_pe, the cache row [normalised latent | rotated k_pe]), shared
// by its own kernel (mla_write_kernels.cu) and the kernel that runs it beside the W_UK GEMV in one launch
// (mla_prepare_kernels.cu), so both give the same bits. At batch 1 it is a latency chain, so every global
// load comes first and in parallel (the latent and norm values a thread needs, the first rope pairs of k_pe
// and q_pe, the position, slot and frequencies; the weights before pdl_wait), then one barrier: the token's
// rope angles into shared memory (the same float32 cosf/sinf products as rope_kernel, so the same bits) and
// the warps' sums of squares, which every warp then reduces itself in block_inv_rms's order (the same bits
// as rms_norm_kernel). Then the cache row as float32 or bf16 and the rotation of k_pe and q_pe in place.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/pdl.cuh"

namespace dsinfer::cuda::mla_write {

constexpr int kThreads = 256;       // the sums of squares follow rms_norm_kernel's block of 256
constexpr int kMaxRopePairs = 256;  // P / 2 the shared angle table holds
constexpr int kLatRegs = 4;         // latent values per thread held in registers: R <= 1024
constexpr int kPairRegs = 4;        // rope pairs per thread loaded up front (more run a second loop)
// Shared memory of one block: cos and sin of the token's angles, then the warps' sums of squares.
constexpr int kSmemFloats = 2 * kMaxRopePairs + kThreads / 32;

// Whether the block code takes R latent values and P rope dims.
constexpr bool supported(int64_t R, int64_t P) {
  return P >= 0 && P % 2 == 0 && P / 2 <= kMaxRopePairs && R > 0 && R <= kLatRegs * kThreads;
}

__device__ __forceinline__ void rotated(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x1 * c + x0 * s;
}

// Token t's cache write: q_pe [T, H, P] and k_pe [T, P] rotated in place, row slot_mapping[t] of cache (rows
// of `width` = R + P values) = [latent[t] / rms(latent[t]) * norm | rotated k_pe[t]]. smem: kSmemFloats
// floats. Called by all kThreads threads of the block; calls pdl_wait and pdl_trigger.
template <typename KV>
__device__ __forceinline__ void rope_write_row(float* q_pe, float* k_pe, const float* latent,
                                               const uint16_t* norm, float eps, KV* cache, int64_t width,
                                               const int32_t* positions, const int64_t* slot_mapping,
                                               const float* inv_freq, int H, int R, int P, float scaling,
                                               bool interleaved, int64_t t, float* smem) {
  float* cos_s = smem;                        // [kMaxRopePairs]
  float* sin_s = smem + kMaxRopePairs;        // [kMaxRopePairs]
  float* partial = smem + 2 * kMaxRopePairs;  // [kThreads / 32]
  const int tid = threadIdx.x, lane = tid % 32, half = P / 2;
  // Weights first (nothing earlier writes them), then, after pdl_wait, everything else at once.
  float nrm[kLatRegs];
#pragma unroll
  for (int k = 0; k < kLatRegs; ++k) {
    const int i = tid + k * kThreads;
    nrm[k] = i < R ? __uint_as_float(static_cast<uint32_t>(norm[i]) << 16) : 0.0f;
  }
  const float freq0 = tid < half ? inv_freq[tid] : 0.0f;
  pdl_wait();
  pdl_trigger();
  const float* lat = latent + t * R;
  float* k = k_pe + t * P;
  float* q = q_pe + t * H * P;
  const int pairs = (H + 1) * half;  // pair idx < half: k_pe's pair idx; then head idx / half - 1 of q_pe
  // Element offsets (into k, or into q past k's P) of pair idx.
  auto pair_at = [&](int idx, int* a, int* b, int* i) -> float* {
    const int h = idx / half - 1;
    *i = idx % half;
    *a = interleaved ? 2 * *i : *i;
    *b = interleaved ? 2 * *i + 1 : *i + half;
    return h < 0 ? k : q + h * P;
  };
  const float pos = static_cast<float>(positions[t]);
  const int64_t slot = slot_mapping[t];
  float lv[kLatRegs];
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r) {
    const int i = tid + r * kThreads;
    lv[r] = i < R ? lat[i] : 0.0f;
  }
  float x0[kPairRegs], x1[kPairRegs];
#pragma unroll
  for (int r = 0; r < kPairRegs; ++r) {
    const int idx = tid + r * kThreads;
    x0[r] = x1[r] = 0.0f;
    if (idx < pairs) {
      int a, b, i;
      const float* v = pair_at(idx, &a, &b, &i);
      x0[r] = v[a];
      x1[r] = v[b];
    }
  }
  if (tid < half) {
    const float freq = freq0 * pos;
    cos_s[tid] = cosf(freq) * scaling;
    sin_s[tid] = sinf(freq) * scaling;
  }
  // Sum of squares in block_inv_rms's order: thread i sums elements i, i + 256, ...; a butterfly per warp;
  // the warps' sums (zero-padded to 32) by a second butterfly, which every warp does for itself.
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r)
    if (tid + r * kThreads < R) ss += lv[r] * lv[r];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) partial[tid / 32] = ss;
  __syncthreads();  // angles and partial sums visible
  float tot = lane < kThreads / 32 ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o /= 2) tot += __shfl_xor_sync(0xffffffffu, tot, o);
  const float inv = rsqrtf(tot / static_cast<float>(R) + eps);
  KV* row = cache + slot * width;
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r) {
    const int i = tid + r * kThreads;
    if (i < R) row[i] = attn::from_float<KV>(nrm[r] * (lv[r] * inv));
  }
  // Rotate pair idx (values v0, v1) and store it, into the cache row too for k_pe's pairs.
  auto store_pair = [&](int idx, float v0, float v1) {
    int a, b, i;
    float* v = pair_at(idx, &a, &b, &i);
    float y0, y1;
    rotated(v0, v1, cos_s[i], sin_s[i], &y0, &y1);
    v[a] = y0;
    v[b] = y1;
    if (idx < half) {
      row[R + a] = attn::from_float<KV>(y0);
      row[R + b] = attn::from_float<KV>(y1);
    }
  };
#pragma unroll
  for (int r = 0; r < kPairRegs; ++r) {
    const int idx = tid + r * kThreads;
    if (idx < pairs) store_pair(idx, x0[r], x1[r]);
  }
  for (int idx = tid + kPairRegs * kThreads; idx < pairs; idx += kThreads) {
    int a, b, i;
    const float* v = pair_at(idx, &a, &b, &i);
    store_pair(idx, v[a], v[b]);
  }
}

}  // namespace dsinfer::cuda::mla_write
