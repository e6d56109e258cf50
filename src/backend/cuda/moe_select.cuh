// The per-token expert selection of DeepSeekMoE routing, shared by the separate selection kernel
// (moe_route_kernels.cu) and the fused decode routing kernel (moe_norm_route_kernels.cu), so that both give
// the same bits: one warp scores a token's logits, masks expert groups and picks the top k by repeated
// arg-max (ties: lower index), as CpuBackend::moe_route.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/moe_kernels.h"

namespace dsinfer::cuda::detail {

__device__ __forceinline__ bool route_better(float v1, int i1, float v2, int i2) {
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// Index of the largest vals[i], i < n, not taken (ties: lower index), on every lane of the warp; -1 if none.
__device__ __forceinline__ int route_warp_argmax(const float* vals, const unsigned char* taken, int n) {
  const int lane = threadIdx.x % 32;
  float bv = 0.0f;
  int bi = -1;
  for (int i = lane; i < n; i += 32) {
    if (!taken[i] && (bi < 0 || route_better(vals[i], i, bv, bi))) {
      bv = vals[i];
      bi = i;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || route_better(ov, oi, bv, bi))) {
      bv = ov;
      bi = oi;
    }
  }
  return bi;
}

__device__ __forceinline__ float route_warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float route_warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Floats of one warp's scratch: score [E], sel [E], gscore [G], chosen [K] (int), taken [max(E, G)] (bytes).
__host__ __device__ inline int select_scratch_floats(int E, int G, int K) {
  return 2 * E + G + K + ((E > G ? E : G) + 3) / 4;
}

// One token: logits [E] (read through L2, so values other blocks of the same launch wrote are seen) ->
// ids [K], wout [K]. Called by the 32 lanes of one warp with its scratch (select_scratch_floats floats).
__device__ __forceinline__ void route_select_token(const float* logits, const float* bias, int32_t* ids,
                                                   float* wout, int E, const MoeRouteParams& p,
                                                   float* scratch) {
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  const int lane = threadIdx.x % 32;
  float* score = scratch;                                               // [E] logits, then scores
  float* sel = score + E;                                               // [E] selection values
  float* gscore = sel + E;                                              // [G]
  int* chosen = reinterpret_cast<int*>(gscore + G);                     // [K]
  unsigned char* taken = reinterpret_cast<unsigned char*>(chosen + K);  // [max(E, G)]

  if (p.scoring == MoeScoring::kSoftmax) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, score[e] = __ldcg(logits + e));
    mx = route_warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (score[e] = expf(score[e] - mx));
    sum = route_warp_sum(sum);
    for (int e = lane; e < E; e += 32) score[e] /= sum;
  } else if (p.scoring == MoeScoring::kSigmoid) {
    for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-__ldcg(logits + e)));
  } else {
    for (int e = lane; e < E; e += 32) {
      const float s = __ldcg(logits + e);
      score[e] = sqrtf(s > 20.0f ? s : log1pf(expf(s)));
    }
  }
  for (int e = lane; e < E; e += 32) {
    sel[e] = score[e] + (p.method == MoeTopk::kNoauxTc && bias ? bias[e] : 0.0f);
    taken[e] = 0;
  }
  __syncwarp();

  if (p.method != MoeTopk::kGreedy) {
    const int per = E / G;
    for (int g = lane; g < G; g += 32) {
      const float* grp = sel + g * per;
      float m1 = -INFINITY, m2 = -INFINITY;
      int i1 = -1;
      for (int i = 0; i < per; ++i)
        if (i1 < 0 || grp[i] > m1) {
          m1 = grp[i];
          i1 = i;
        }
      if (p.method == MoeTopk::kNoauxTc && per >= 2) {
        int i2 = -1;
        for (int i = 0; i < per; ++i)
          if (i != i1 && (i2 < 0 || grp[i] > m2)) {
            m2 = grp[i];
            i2 = i;
          }
        gscore[g] = m1 + m2;
      } else {
        gscore[g] = m1;
      }
    }
    __syncwarp();
    for (int r = 0; r < p.topk_group && r < G; ++r) {
      const int gi = route_warp_argmax(gscore, taken, G);
      if (lane == 0 && gi >= 0) taken[gi] = 1;
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32) {
      const int g = e / per;
      if (!(g < G && taken[g])) sel[e] = 0.0f;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32) taken[e] = 0;
    __syncwarp();
  }

  for (int k = 0; k < K; ++k) {
    const int ei = route_warp_argmax(sel, taken, E);
    if (lane == 0) {
      chosen[k] = ei;
      taken[ei] = 1;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float denom = 0.0f;
    for (int k = 0; k < K; ++k) denom += score[chosen[k]];
    const bool norm = p.norm_topk_prob && (K > 1 || p.scoring != MoeScoring::kSoftmax);
    for (int k = 0; k < K; ++k) {
      float w = score[chosen[k]];
      if (norm) w /= (denom + 1e-20f);
      ids[k] = chosen[k];
      wout[k] = w * p.routed_scaling_factor;
    }
  }
  __syncwarp();
}

}  // namespace dsinfer::cuda::detail
