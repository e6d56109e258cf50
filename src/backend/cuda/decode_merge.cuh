// The merge of split-KV decode partials, shared by the separate combine kernel and the fused tail of the
// decode kernels (the last split CTA of a (query, head group) to arrive merges the group), so both compute
// the same bits: per head, weights w_s = 2^(lse_s - max lse) in split order (0 for splits that saw no
// position), out = (sum_s w_s o_s, one fma per split in split order) * (1 / sum_s w_s).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda::detail {

inline constexpr int kMergeHeads = 8;  // heads whose weights one pass keeps in shared memory
inline constexpr int kMergeBatch = 8;  // splits whose partial rows are loaded before their fmas

struct MergeSmem {
  float w[kMergeHeads][kMaxDecodeSplits];
  float inv_total[kMergeHeads];
  int last;  // arrive_last's verdict for the CTA
};

// One head's split weights into w[0, splits) and 1 / their sum (one thread).
__device__ __forceinline__ void split_weights(const float* lse, int splits, float* w, float* inv_total) {
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, __ldcg(lse + s));
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float l = __ldcg(lse + s);
    const float wt = l == -INFINITY ? 0.0f : exp2f(l - mx);
    w[s] = wt;
    total += wt;
  }
  *inv_total = 1.0f / total;
}

// out[h0 + g] for g < nh (rows of Dv floats, out_row = out + t * Hq * Dv) from the partials of query i:
// partials [num_queries, Hq, splits, Dv] then lse [num_queries, Hq, splits]. Every thread of the CTA calls
// it (it synchronises). Dv % 4 == 0. Partial rows of splits with weight 0 are loaded but not used.
__device__ __forceinline__ void merge_heads(const float* partials, const float* lse, int64_t i, int Hq,
                                            int h0, int nh, int Dv, int splits, float* out_row,
                                            MergeSmem& sm) {
  const int dv4 = Dv / 4;
  for (int hb = 0; hb < nh; hb += kMergeHeads) {
    const int hn = min(kMergeHeads, nh - hb);
    for (int g = threadIdx.x; g < hn; g += blockDim.x)
      split_weights(lse + (i * Hq + h0 + hb + g) * splits, splits, sm.w[g], &sm.inv_total[g]);
    __syncthreads();
    for (int idx = threadIdx.x; idx < hn * dv4; idx += blockDim.x) {
      const int g = idx / dv4, d = (idx % dv4) * 4, h = h0 + hb + g;
      const float4* o = reinterpret_cast<const float4*>(partials + (i * Hq + h) * splits * Dv + d);
      const int step = dv4;  // float4s between consecutive splits
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
        float4 v[kMergeBatch];
#pragma unroll
        for (int j = 0; j < kMergeBatch; ++j)
          v[j] = s0 + j < splits ? __ldcg(o + static_cast<int64_t>(s0 + j) * step)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < kMergeBatch; ++j) {
          if (s0 + j < splits) {
            const float wt = sm.w[g][s0 + j];
            if (wt != 0.0f) {
              acc.x = fmaf(wt, v[j].x, acc.x);
              acc.y = fmaf(wt, v[j].y, acc.y);
              acc.z = fmaf(wt, v[j].z, acc.z);
              acc.w = fmaf(wt, v[j].w, acc.w);
            }
          }
        }
      }
      const float inv = sm.inv_total[g];
      *reinterpret_cast<float4*>(out_row + static_cast<int64_t>(h) * Dv + d) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
    __syncthreads();  // sm is reused by the next pass
  }
}

// Called by every thread of a split CTA after its partial outputs and lse values are stored: counts the CTA's
// arrival at `counter` and returns true (in every thread) in the CTA that arrives last of `splits`, which
// then sees the other CTAs' partials and has already reset the counter to 0 for the next launch.
__device__ __forceinline__ bool arrive_last(int* counter, int splits, MergeSmem& sm) {
  __threadfence();  // this CTA's partials are visible device-wide before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) {
    const int last = atomicAdd(counter, 1) == splits - 1;
    if (last) atomicExch(counter, 0);  // every split has arrived: nobody else touches it in this launch
    sm.last = last;
  }
  __syncthreads();
  const bool last = sm.last != 0;
  if (last) __threadfence();
  return last;
}

}  // namespace dsinfer::cuda::detail
