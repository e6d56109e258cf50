// The merge of MLA split partial states, shared by the separate combine kernel, the fused tail of the MLA
// decode kernels (the last split block of a (token, head group) to arrive merges the group; the tensor-core
// kernels' common epilogue, mla_tc_finish) and the merge + W_UV kernel (mla_uv_kernels.cu), so all compute
// the same bits. Partial states: ws_acc [T, splits, H, R] (unnormalised latent sums) and ws_ml [T, splits,
// H, 2] (running max, running sum). Per head, one warp finds M = max_s m_s and the weights w_s = exp(m_s -
// M) (0 for splits that saw no position), L = sum_s w_s l_s (lane-strided partial sums, then a butterfly:
// the order depends on the split count only); every output is (sum_s w_s acc_s, one fma per split in split
// order) * (1 / L), or 0 where L is 0.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace dsinfer::cuda::detail {

// Called by every thread of a split block after its partial state is stored: counts the block's arrival at
// `counter` and returns true (in every thread) in the block that arrives last of `splits`, which then sees
// the other blocks' partials and has already reset the counter to 0 for the next launch. `flag`: a shared
// int.
__device__ __forceinline__ bool mla_arrive_last(int* counter, int splits, int* flag) {
  __threadfence();  // this block's partials are visible device-wide before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) {
    const int last = atomicAdd(counter, 1) == splits - 1;
    if (last) atomicExch(counter, 0);  // every split has arrived: nobody else touches it in this launch
    *flag = last;
  }
  __syncthreads();
  const bool last = *flag != 0;
  if (last) __threadfence();
  return last;
}

// The merge weights of one (token, head), computed by one whole warp: ml points at split 0's (max, sum),
// consecutive splits ml_step floats apart. Writes w[s] = exp(m_s - M) (0 for a split that saw no position)
// for s < splits and returns 1 / L in every lane.
__device__ __forceinline__ float mla_merge_weights(const float* ml, int64_t ml_step, int splits, float* w) {
  const int lane = threadIdx.x % 32;
  float mx = -INFINITY;
  for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, __ldcg(ml + s * ml_step));
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float l = 0.0f;
  for (int s = lane; s < splits; s += 32) {
    const float m = __ldcg(ml + s * ml_step);
    const float wt = m == -INFINITY ? 0.0f : expf(m - mx);
    w[s] = wt;
    l = fmaf(wt, __ldcg(ml + s * ml_step + 1), l);
  }
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  return l > 0.0f ? 1.0f / l : 0.0f;  // 0: no split saw a position (sparse MLA's empty list): zeros
}

// sum_s w[s] acc_s of 4 consecutive latent values (src: split 0's, consecutive splits acc_step floats
// apart, 16-byte aligned): one fma per split in split order, kBatch splits' values loaded before their fmas.
__device__ __forceinline__ float4 mla_merge_sum4(const float* src, int64_t acc_step, const float* w,
                                                 int splits) {
  constexpr int kBatch = 4;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      v[j] = s0 + j < splits ? __ldcg(reinterpret_cast<const float4*>(src + (s0 + j) * acc_step))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j < splits) {
        const float wt = w[s0 + j];
        o.x = fmaf(wt, v[j].x, o.x);
        o.y = fmaf(wt, v[j].y, o.y);
        o.z = fmaf(wt, v[j].z, o.z);
        o.w = fmaf(wt, v[j].w, o.w);
      }
    }
  }
  return o;
}

// out[t_out, h0 + g] for g < hg from the splits' partial states of launch token t (t_out = t unless the
// launch runs over a row list). Every thread of the block calls it (it synchronises). w_s: shared scratch of
// hg * splits floats; inv_s: shared [hg].
__device__ __forceinline__ void mla_merge(const float* ws_acc, const float* ws_ml, int64_t t, int64_t t_out,
                                          int H, int R, int h0, int hg, int splits, float* out, float* w_s,
                                          float* inv_s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const int64_t ml_step = static_cast<int64_t>(H) * 2;  // floats between consecutive splits of ws_ml
  for (int g = warp; g < hg; g += nwarps) {
    const float inv =
        mla_merge_weights(ws_ml + (t * splits * H + h0 + g) * 2, ml_step, splits, w_s + g * splits);
    if (lane == 0) inv_s[g] = inv;
  }
  __syncthreads();
  const int64_t acc_step = static_cast<int64_t>(H) * R;  // floats between consecutive splits of ws_acc
  const float* acc0 = ws_acc + (t * splits * H + h0) * static_cast<int64_t>(R);
  float* out0 = out + (t_out * H + h0) * static_cast<int64_t>(R);
  if (R % 4 == 0) {
    const int r4 = R / 4;
    for (int idx = threadIdx.x; idx < hg * r4; idx += blockDim.x) {
      const int g = idx / r4, r = (idx % r4) * 4;
      const float4 o =
          mla_merge_sum4(acc0 + static_cast<int64_t>(g) * R + r, acc_step, w_s + g * splits, splits);
      const float inv = inv_s[g];
      *reinterpret_cast<float4*>(out0 + static_cast<int64_t>(g) * R + r) =
          make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
    }
  } else {
    for (int idx = threadIdx.x; idx < hg * R; idx += blockDim.x) {
      const int g = idx / R, r = idx % R;
      const float* src = acc0 + static_cast<int64_t>(g) * R + r;
      const float* w = w_s + g * splits;
      float o = 0.0f;
      for (int s = 0; s < splits; ++s) o = fmaf(w[s], __ldcg(src + s * acc_step), o);
      out0[static_cast<int64_t>(g) * R + r] = o * inv_s[g];
    }
  }
}

// The end of a tensor-core decode block (mla_tc_kernels.cu, mla_tc_v2_kernels.cu; every thread, 8 warps of
// a 16-head group): acc is O [16 heads, this warp's 64 latent columns] as m16n8 fragments (rows g and g + 8
// are heads g and g + 8; columns 64 warp + 8 j + 2 tq (+1)), m_s / l_s the heads' running max and sum in
// shared memory. Unsplit: out = O / l. Split: the partial state into ws_acc / ws_ml, then with arrival
// counters the last split block of the (token, head group) merges every split (mla_merge, scratch red_s and
// inv_s; flag_s a shared int).
__device__ __forceinline__ void mla_tc_finish(const float (&acc)[8][4], const float* m_s, const float* l_s,
                                              float* out, float* ws_acc, float* ws_ml, int* arrivals,
                                              int64_t tl, int64_t t, int H, int R, int h0, int hg, int split,
                                              int splits, int* flag_s, float* red_s, float* inv_s) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int64_t base = (tl * splits + split) * H + h0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = g + 8 * half;
    if (h >= hg) continue;
    // l 0: a sparse head that saw no position writes zeros (a dense split always sees one).
    const float inv = splits == 1 ? (l_s[h] > 0.0f ? 1.0f / l_s[h] : 0.0f) : 1.0f;
    float* dst = splits == 1 ? out + (t * H + h0 + h) * R : ws_acc + (base + h) * R;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = warp * 64 + j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(dst + col) = make_float2(acc[j][2 * half] * inv, acc[j][2 * half + 1] * inv);
    }
  }
  if (splits > 1 && tid < hg) {
    ws_ml[(base + tid) * 2] = m_s[tid];
    ws_ml[(base + tid) * 2 + 1] = l_s[tid];
  }
  if (splits > 1 && arrivals && mla_arrive_last(arrivals + blockIdx.x, splits, flag_s))
    mla_merge(ws_acc, ws_ml, tl, t, H, R, h0, hg, splits, out, red_s, inv_s);
}

}  // namespace dsinfer::cuda::detail
