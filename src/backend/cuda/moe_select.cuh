// The per-token expert selection of DeepSeekMoE routing, shared by the separate selection kernel
// (moe_route_kernels.cu) and the fused decode routing kernel (moe_norm_route_kernels.cu), so that both give
// the same bits: one warp scores a token's logits (route_score_token); the selection kernel's warp then masks
// expert groups and picks the top k by repeated arg-max (route_select_token), the fused kernel's last block
// does the same for every token with all its warps at once (route_select_block: the top k as the experts of
// rank < k in the order (value descending, index ascending), which is what repeated arg-max picks). Ties go
// to the lower index, as CpuBackend::moe_route.
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

// A logit: from shared memory (SHARED) or through L2, so that values other blocks of the same launch wrote
// are seen.
template <bool SHARED>
__device__ __forceinline__ float route_logit(const float* logits, int e) {
  if constexpr (SHARED) return logits[e];
  return __ldcg(logits + e);
}

// One token's scores: logits [E] (SHARED: in shared memory; else read through L2) -> score [E] and sel [E]
// (the selection values: score + bias for noaux_tc). Called by the 32 lanes of one warp; the sums follow the
// lane order, so the bits depend on E only. A lane's logits (and biases) of a pass are loaded together
// before any is used: one L2 round trip a pass of 256 experts, not one per expert (the stores into the
// scratch would otherwise hold each load behind the previous expert's).
template <bool SHARED = false>
__device__ __forceinline__ void route_score_token(const float* logits, const float* bias, int E,
                                                  const MoeRouteParams& p, float* score, float* sel) {
  constexpr int kPer = 8;  // a lane's experts a pass
  const int lane = threadIdx.x % 32;
  const bool softmax = p.scoring == MoeScoring::kSoftmax;
  const bool biased = p.method == MoeTopk::kNoauxTc && bias != nullptr;
  float mx = -INFINITY;
  for (int e0 = lane; e0 < E; e0 += 32 * kPer) {
    float lv[kPer], bv[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = e0 + 32 * j;
      lv[j] = e < E ? route_logit<SHARED>(logits, e) : 0.0f;
      bv[j] = biased && !softmax && e < E ? __ldg(bias + e) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = e0 + 32 * j;
      if (e < E) {
        if (softmax) {
          mx = fmaxf(mx, score[e] = lv[j]);
        } else {
          const float s = lv[j];
          score[e] = p.scoring == MoeScoring::kSigmoid ? 1.0f / (1.0f + expf(-s))
                                                       : sqrtf(s > 20.0f ? s : log1pf(expf(s)));
          sel[e] = score[e] + bv[j];
        }
      }
    }
  }
  if (softmax) {
    mx = route_warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (score[e] = expf(score[e] - mx));
    sum = route_warp_sum(sum);
    for (int e = lane; e < E; e += 32) score[e] /= sum;
    for (int e = lane; e < E; e += 32) sel[e] = score[e] + (biased ? bias[e] : 0.0f);
  }
  __syncwarp();
}

// Floats of one warp's scratch: score [E], sel [E], gscore [G], chosen [K] (int), taken [max(E, G)] (bytes).
__host__ __device__ inline int select_scratch_floats(int E, int G, int K) {
  return 2 * E + G + K + ((E > G ? E : G) + 3) / 4;
}

// A group's score for the group-limited methods over grp [per] by one thread: its best value (the first
// index of the largest), plus with top2 (noaux_tc) the best of the others.
__device__ __forceinline__ float route_group_score_scan(const float* grp, int per, bool top2) {
  float m1 = -INFINITY, m2 = -INFINITY;
  int i1 = -1;
  for (int i = 0; i < per; ++i)
    if (i1 < 0 || grp[i] > m1) {
      m1 = grp[i];
      i1 = i;
    }
  if (!top2 || per < 2) return m1;
  int i2 = -1;
  for (int i = 0; i < per; ++i)
    if (i != i1 && (i2 < 0 || grp[i] > m2)) {
      m2 = grp[i];
      i2 = i;
    }
  return m1 + m2;
}

// Whether the group-limited methods mask any group: not where every group is kept (topk_group >= n_group, as
// DeepSeek-V4's single group), whose mask changes nothing, so its scans are skipped.
__host__ __device__ inline bool route_masks_groups(const MoeRouteParams& p) {
  const int G = p.n_group > 0 ? p.n_group : 1;
  return p.method != MoeTopk::kGreedy && p.topk_group < G;
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

  route_score_token(logits, bias, E, p, score, sel);
  for (int e = lane; e < E; e += 32) taken[e] = 0;
  __syncwarp();

  if (route_masks_groups(p)) {
    const int per = E / G;
    for (int g = lane; g < G; g += 32) {
      gscore[g] = route_group_score_scan(sel + g * per, per, p.method == MoeTopk::kNoauxTc);
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

// The selection order of route_warp_argmax as a key: NaN as -inf (a total order, so every rank is unique).
__device__ __forceinline__ float route_key(float v) {
  return v != v ? -INFINITY : v;
}

// A group's score for the group-limited methods over grp [per] (per <= 32), on every lane of the warp: its
// best value (the first index of the largest, as route_select_token's scan), plus with top2 (noaux_tc) the
// best of the others.
__device__ __forceinline__ float route_group_score_warp(const float* grp, int per, bool top2) {
  const int lane = threadIdx.x % 32;
  const float v = lane < per ? route_key(grp[lane]) : -INFINITY;
  const float m = route_warp_max(v);
  const int i1 = __ffs(__ballot_sync(0xffffffffu, lane < per && v == m)) - 1;
  const float m1 = __shfl_sync(0xffffffffu, v, i1);
  if (!top2 || per < 2) return m1;
  const bool rest = lane < per && lane != i1;
  const float m2r = route_warp_max(rest ? v : -INFINITY);
  const int i2 = __ffs(__ballot_sync(0xffffffffu, rest && v == m2r)) - 1;
  return m1 + __shfl_sync(0xffffffffu, v, i2);
}

// Floats of route_select_block's scratch for T tokens: score [T, E], sel [T, E], gscore [T, G], gchosen
// [T, G] (int), candidates [T, ceil(E / 32), min(K, 32)] (value, then index), chosen [T, K] (int).
__host__ __device__ inline int select_block_scratch_floats(int T, int E, int G, int K) {
  const int nc = (E + 31) / 32, kc = K < 32 ? K : 32;
  return 2 * T * E + 2 * T * G + 2 * T * nc * kc + T * K;
}

// Every token's selection by the whole block (blockDim.x a multiple of 32; every thread calls it, it
// synchronises): logits [T, E] (SHARED: in shared memory; else read through L2) -> ids [T, K], wout [T, K],
// the bits of route_select_token per token. One warp per token scores (route_score_token), one warp per
// (token, group) scores the groups; the chosen groups and experts are those of rank below topk_group / K in
// route_better's order (what repeated arg-max picks): each warp ranks a chunk of 32 experts among
// themselves, the best min(K, 32) of every chunk are ranked among each other. Returns the chosen ids [T, K]
// in the scratch (shared memory), valid for every thread. mark(step) is called by every thread after each
// step (0 scored, 1 groups masked, 2 candidates, 3 ranked, 4 weights written): a diagnostic's hook.
struct NoSelectMarks {
  __device__ void operator()(int) const {}
};
template <bool SHARED = false, typename Marks = NoSelectMarks>
__device__ __forceinline__ const int32_t* route_select_block(const float* logits, const float* bias,
                                                             int32_t* ids, float* wout, int T, int E,
                                                             const MoeRouteParams& p, float* scratch,
                                                             Marks mark = {}) {
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  const int nc = (E + 31) / 32, kc = K < 32 ? K : 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  float* score = scratch;                                      // [T, E]
  float* sel = score + T * E;                                  // [T, E]
  float* gscore = sel + T * E;                                 // [T, G]
  int* gchosen = reinterpret_cast<int*>(gscore + T * G);       // [T, G]
  float* cand_v = reinterpret_cast<float*>(gchosen + T * G);   // [T, nc, kc]
  int* cand_i = reinterpret_cast<int*>(cand_v + T * nc * kc);  // [T, nc, kc]
  int32_t* chosen = cand_i + T * nc * kc;                      // [T, K]

  for (int t = warp; t < T; t += nwarps)
    route_score_token<SHARED>(logits + t * E, bias, E, p, score + t * E, sel + t * E);
  __syncthreads();
  mark(0);

  if (route_masks_groups(p)) {
    const int per = E / G;
    for (int task = warp; task < T * G; task += nwarps) {
      const float* grp = sel + (task / G) * E + (task % G) * per;
      float gs;
      if (per <= 32) {
        gs = route_group_score_warp(grp, per, p.method == MoeTopk::kNoauxTc);
      } else {  // route_select_token's scan
        gs = route_group_score_scan(grp, per, p.method == MoeTopk::kNoauxTc);
      }
      if (lane == 0) gscore[task] = gs;
    }
    __syncthreads();
    for (int task = threadIdx.x; task < T * G; task += blockDim.x) {
      const float* gt = gscore + (task / G) * G;
      const int g = task % G;
      const float v = route_key(gt[g]);
      int rank = 0;
      for (int j = 0; j < G; ++j) rank += route_better(route_key(gt[j]), j, v, g);
      gchosen[task] = rank < p.topk_group;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < T * E; i += blockDim.x) {
      const int g = (i % E) / per;
      if (!(g < G && gchosen[(i / E) * G + g])) sel[i] = 0.0f;
    }
    __syncthreads();
  }
  mark(1);

  // Candidates: the kc best of each chunk of 32 experts (experts past E: -inf, ranked last).
  for (int task = warp; task < T * nc; task += nwarps) {
    const float* st = sel + (task / nc) * E;
    const int e0 = (task % nc) * 32, e = e0 + lane;
    const float v = e < E ? route_key(st[e]) : -INFINITY;
    int rank = 0;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
      const float vj = e0 + j < E ? route_key(st[e0 + j]) : -INFINITY;
      rank += route_better(vj, e0 + j, v, e);
    }
    if (rank < kc) {
      cand_v[task * kc + rank] = v;
      cand_i[task * kc + rank] = e;
    }
  }
  __syncthreads();
  mark(2);
  // A candidate's rank among its token's candidates is its rank among all experts where that is below K.
  for (int task = threadIdx.x; task < T * nc * kc; task += blockDim.x) {
    const int t = task / (nc * kc), e = cand_i[task];
    if (e >= E) continue;
    const float v = cand_v[task];
    const float* cv = cand_v + t * nc * kc;
    const int* ci = cand_i + t * nc * kc;
    int rank = 0;
    for (int j = 0; j < nc * kc; ++j) rank += route_better(cv[j], ci[j], v, e);
    if (rank < K) chosen[t * K + rank] = e;
  }
  __syncthreads();
  mark(3);
  const bool norm = p.norm_topk_prob && (K > 1 || p.scoring != MoeScoring::kSoftmax);
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const float* st = score + t * E;
    const int32_t* ct = chosen + t * K;
    float denom = 0.0f;
    for (int k = 0; k < K; ++k) denom += st[ct[k]];
    for (int k = 0; k < K; ++k) {
      float w = st[ct[k]];
      if (norm) w /= (denom + 1e-20f);
      ids[t * K + k] = ct[k];
      wout[t * K + k] = w * p.routed_scaling_factor;
    }
  }
  mark(4);
  return chosen;
}

}  // namespace dsinfer::cuda::detail
