// The merge of split-KV decode partials, shared by the separate combine kernel and the fused tail of the
// decode kernels (the last split CTA of a (query, head group) to arrive merges the group), so both compute
// the same bits: per head, one warp finds the weights w_s = 2^(lse_s - max lse) (0 for splits that saw no
// position) and their sum (split_weights), out = (sum_s w_s o_s, one fma per split in split order) *
// (1 / sum_s w_s).
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

// One head's split weights, computed by one whole warp (each lane loads its splits' lse values once, so the
// loads are in flight together): w[s] = 2^(lse_s - max) for s < splits (0 for a split that saw no
// position); returns 1 / sum_s w_s in every lane (two lane-strided partial sums, then a butterfly: the order
// depends on the split count only).
__device__ __forceinline__ float split_weights(const float* lse, int splits, float* w) {
  static_assert(kMaxDecodeSplits <= 64, "two splits per lane");
  const int lane = threadIdx.x % 32;
  const float l0 = lane < splits ? __ldcg(lse + lane) : -INFINITY;
  const float l1 = lane + 32 < splits ? __ldcg(lse + lane + 32) : -INFINITY;
  float mx = fmaxf(l0, l1);
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float w0 = l0 == -INFINITY ? 0.0f : exp2f(l0 - mx);  // split 0 always saw position 0: mx is finite
  const float w1 = l1 == -INFINITY ? 0.0f : exp2f(l1 - mx);
  if (lane < splits) w[lane] = w0;
  if (lane + 32 < splits) w[lane + 32] = w1;
  float total = w0 + w1;
  for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
  return 1.0f / total;
}

// out[h0 + g] for g < nh (rows of Dv floats, out_row = out + t * Hq * Dv) from the partials of query i:
// partials [num_queries, Hq, splits, Dv] then lse [num_queries, Hq, splits]. Every thread of the CTA calls
// it (it synchronises; blockDim.x a multiple of 32). Dv % 4 == 0. Partial rows of splits with weight 0 are
// loaded but not used.
__device__ __forceinline__ void merge_heads(const float* partials, const float* lse, int64_t i, int Hq,
                                            int h0, int nh, int Dv, int splits, float* out_row,
                                            MergeSmem& sm) {
  const int dv4 = Dv / 4;
  for (int hb = 0; hb < nh; hb += kMergeHeads) {
    const int hn = min(kMergeHeads, nh - hb);
    for (int g = threadIdx.x / 32; g < hn; g += blockDim.x / 32) {
      const float inv = split_weights(lse + (i * Hq + h0 + hb + g) * splits, splits, sm.w[g]);
      if (threadIdx.x % 32 == 0) sm.inv_total[g] = inv;
    }
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
