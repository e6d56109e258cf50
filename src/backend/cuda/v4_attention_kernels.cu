// DeepSeek-V4's shared-KV attention kernels (v4_kernels.h) over the paged cache (float32 or bf16 rows): the
// sliding-window + compressed attention with sinks (one block per (head, token, key split), an online softmax
// per warp over the present keys, each key row loaded once into registers for both its dot and its value; at
// decode the key ranges are split over blocks and merged, flash-decoding style).
// CUDA-core kernels: each head still re-reads its token's keys (from L2 after the first head).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/v4_kernels.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using attn::slot_of;
using attn::to_float;

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kVec = 4;                            // head-dim values a lane loads at once
constexpr int kIts = kMaxV4HeadDim / (32 * kVec);  // loads of a key row per lane
static_assert(kVec * kAttnThreads >= kMaxV4HeadDim, "the merge gives each thread kVec head-dim values");
constexpr int kMaxSplits = 16;
constexpr int64_t kMaxGridY = 65535;

// A lane's four head-dim values of a cache row as loaded (bf16 pairs stay packed) and as floats; p 8- /
// 16-byte aligned.
template <typename E>
struct Raw4;
template <>
struct Raw4<float> {
  using type = float4;
  __device__ static float4 load(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ static float4 zero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
  __device__ static float4 to_float(float4 v) { return v; }
};
template <>
struct Raw4<__nv_bfloat16> {
  using type = uint2;
  __device__ static uint2 load(const __nv_bfloat16* p) { return *reinterpret_cast<const uint2*>(p); }
  __device__ static uint2 zero() { return make_uint2(0u, 0u); }
  __device__ static float4 to_float(uint2 u) {
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
  }
};

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

__device__ __forceinline__ float4 axpy4(float w, float4 v, float4 acc) {
  return make_float4(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y), fmaf(w, v.z, acc.z), fmaf(w, v.w, acc.w));
}

// Output values d0 .. d0 + 3 (d0 % 4 == 0) with those among the last rope_dim dims rotated back to position
// pos (interleaved pairs, D - rope_dim even: a pair never straddles two threads' values), rope_kernel's
// rotation with sign -1; unchanged where inv_freq is null.
__device__ __forceinline__ float4 unrope4(float4 v, int d0, int D, const float* inv_freq, int rope_dim,
                                          float scaling, float pos) {
  if (!inv_freq) return v;
  const int offset = D - rope_dim;
  if (d0 >= offset) rope_math::rotate_pair(v.x, v.y, inv_freq[(d0 - offset) / 2], pos, scaling, -1.0f);
  if (d0 + 2 >= offset)
    rope_math::rotate_pair(v.z, v.w, inv_freq[(d0 + 2 - offset) / 2], pos, scaling, -1.0f);
  return v;
}

// The cache row of entry e of token t's keys: the raw window (oldest first, e < nw), then the compressed rows
// (all visible ones, or the selection); null for a -1 hole or a row not yet visible.
template <typename E>
__device__ __forceinline__ const E* v4_key(const AttentionV4Args& a, int64_t t, int32_t seq, int64_t pos,
                                           int64_t nw, int64_t visible, int64_t e) {
  if (e < nw) {
    return static_cast<const E*>(a.window_rows.data) +
           slot_of(a.plan, seq, pos - nw + 1 + e) * a.window_rows.width;
  }
  int64_t j = e - nw;
  if (a.selected) j = a.selected[t * a.K + j];
  if (j < 0 || j >= visible) return nullptr;
  return static_cast<const E*>(a.comp.data) + slot_of(a.plan, seq, j) * a.comp.width;
}

// Block (h, t, split): the entries [n * split / splits, n * (split + 1) / splits) of token t's keys for head
// h. Each warp runs its own online softmax over tiles of 32 entries (tile w, w + 4, ... of the range): it
// packs a tile's present keys (holes skipped), then takes them kRound at a time: lane l loads head-dim values
// 4 l + 128 i of every key of the round at once, dots them with its share of q, and, the logits summed across
// the warp, folds the same registers into its accumulator (K = V: each key row is read once). No block-wide
// barrier until the warps' states are merged at the end. Split 0's warp 0 starts from the sink (m = sink,
// s = 1); the rest from nothing. One split writes out; several write (m, s, acc) for the merge kernel.
template <typename E>
__global__ void __launch_bounds__(kAttnThreads) attention_v4_kernel(AttentionV4Args a, int64_t t0) {
  constexpr int kRound = sizeof(E) == 2 ? 8 : 4;  // keys a warp holds in registers at once
  using R = Raw4<E>;
  pdl_wait();
  pdl_trigger();
  __shared__ const E* key_w[kAttnWarps][32];
  __shared__ __align__(16) float acc_w[kAttnWarps][kMaxV4HeadDim];
  __shared__ float m_w[kAttnWarps], s_w[kAttnWarps];
  const int64_t h = blockIdx.x, t = t0 + blockIdx.y;
  const int split = blockIdx.z, splits = gridDim.z;
  const int D = static_cast<int>(a.D), tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t seq = a.plan.token_seq[t];
  const int64_t pos = a.plan.positions[t];
  const int64_t nw = a.window < pos + 1 ? a.window : pos + 1;
  const bool has_comp = a.comp.data != nullptr;
  const int64_t visible = has_comp ? (pos + 1) / a.ratio : 0;
  const int64_t n = nw + (has_comp ? (a.selected ? a.K : visible) : 0);
  const int64_t e_begin = n * split / splits, e_end = n * (split + 1) / splits;
  float4 qv[kIts], acc[kIts];
#pragma unroll
  for (int i = 0; i < kIts; ++i) {
    const int d = (i * 32 + lane) * kVec;
    qv[i] = d < D ? *reinterpret_cast<const float4*>(a.q + (t * a.H + h) * D + d) : R::to_float(R::zero());
    acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const bool sink = split == 0 && warp == 0;
  float m = sink ? a.sinks[h] : -INFINITY, s = sink ? 1.0f : 0.0f;
  for (int64_t tile = e_begin + warp * 32; tile < e_end; tile += kAttnWarps * 32) {
    const E* p = tile + lane < e_end ? v4_key<E>(a, t, seq, pos, nw, visible, tile + lane) : nullptr;
    const unsigned present = __ballot_sync(0xffffffffu, p != nullptr);
    if (p) key_w[warp][__popc(present & ((1u << lane) - 1u))] = p;
    const int cnt = __popc(present);
    __syncwarp();
    for (int g = 0; g < cnt; g += kRound) {
      typename R::type v[kRound][kIts];
      const E* kp[kRound];
#pragma unroll
      for (int k = 0; k < kRound; ++k) {
        kp[k] = g + k < cnt ? key_w[warp][g + k] : nullptr;
#pragma unroll
        for (int i = 0; i < kIts; ++i) {
          const int d = (i * 32 + lane) * kVec;
          v[k][i] = kp[k] && d < D ? R::load(kp[k] + d) : R::zero();
        }
      }
      float logit[kRound];
      float cm = m;
#pragma unroll
      for (int k = 0; k < kRound; ++k) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kIts; ++i) dot = dot4(qv[i], R::to_float(v[k][i]), dot);
        for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        logit[k] = kp[k] ? dot * a.scale : -INFINITY;
        cm = fmaxf(cm, logit[k]);
      }
      const float corr = expf(m - cm);  // 0 while m is -inf; cm is finite (key g is present)
      s *= corr;
#pragma unroll
      for (int i = 0; i < kIts; ++i)
        acc[i] = make_float4(acc[i].x * corr, acc[i].y * corr, acc[i].z * corr, acc[i].w * corr);
#pragma unroll
      for (int k = 0; k < kRound; ++k) {
        if (!kp[k]) continue;
        const float w = expf(logit[k] - cm);
        s += w;
#pragma unroll
        for (int i = 0; i < kIts; ++i) acc[i] = axpy4(w, R::to_float(v[k][i]), acc[i]);
      }
      m = cm;
    }
    __syncwarp();  // the tile's keys are read before the next tile's are packed
  }
  // Merge the warps' states: M = max m_w, out = sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) s_w.
  if (lane == 0) {
    m_w[warp] = m;
    s_w[warp] = s;
  }
#pragma unroll
  for (int i = 0; i < kIts; ++i) {
    const int d = (i * 32 + lane) * kVec;
    if (d < D) *reinterpret_cast<float4*>(&acc_w[warp][d]) = acc[i];
  }
  __syncthreads();
  const int d0 = tid * kVec;
  if (d0 >= D) return;
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, m_w[w]);
  float S = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int w = 0; w < kAttnWarps; ++w) {
    if (m_w[w] == -INFINITY) continue;  // a warp without keys (and without the sink)
    const float f = expf(m_w[w] - M);
    S = fmaf(f, s_w[w], S);
    o = axpy4(f, *reinterpret_cast<const float4*>(&acc_w[w][d0]), o);
  }
  if (splits == 1) {
    const float inv = 1.0f / S;
    *reinterpret_cast<float4*>(a.out + (t * a.H + h) * D + d0) =
        unrope4(make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv), d0, D, a.unrope_inv_freq,
                a.unrope_dim, a.unrope_scaling, static_cast<float>(pos));
    return;
  }
  const int64_t slot = (t * a.H + h) * splits + split;
  *reinterpret_cast<float4*>(a.partial + slot * D + d0) = o;
  if (tid == 0) {
    float* ms = a.partial + a.T * a.H * splits * static_cast<int64_t>(D);
    ms[2 * slot] = M;  // -inf (and S = 0) for a split without keys
    ms[2 * slot + 1] = S;
  }
}

// Block (h, t): out = sum_i e^(m_i - M) acc_i / sum_i e^(m_i - M) s_i over the splits (split 0 holds the
// sink, so M is finite), rotated back as unrope4 says.
__global__ void __launch_bounds__(kAttnThreads)
    attention_v4_merge_kernel(const float* partial, float* out, int64_t T, int64_t H, int D, int splits,
                              const int32_t* positions, const float* unrope_inv_freq, int unrope_dim,
                              float unrope_scaling) {
  pdl_wait();
  pdl_trigger();
  const int64_t h = blockIdx.x, t = blockIdx.y, first = (t * H + h) * splits;
  const int d0 = threadIdx.x * kVec;
  if (d0 >= D) return;
  const float* ms = partial + T * H * splits * static_cast<int64_t>(D);
  float M = -INFINITY;
  for (int i = 0; i < splits; ++i) M = fmaxf(M, ms[2 * (first + i)]);
  float S = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i = 0; i < splits; ++i) {
    const float f = expf(ms[2 * (first + i)] - M);  // 0 for an empty split (m = -inf)
    S = fmaf(f, ms[2 * (first + i) + 1], S);
    const float4 p = *reinterpret_cast<const float4*>(partial + (first + i) * D + d0);
    acc = make_float4(fmaf(f, p.x, acc.x), fmaf(f, p.y, acc.y), fmaf(f, p.z, acc.z), fmaf(f, p.w, acc.w));
  }
  const float inv = 1.0f / S;
  *reinterpret_cast<float4*>(out + (t * H + h) * D + d0) =
      unrope4(make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv), d0, D, unrope_inv_freq,
              unrope_dim, unrope_scaling, static_cast<float>(positions[t]));
}

}  // namespace

int attention_v4_splits(int64_t T, int64_t H) {
  // DSINFER_CUDA_V4_SPLITS: 1 to kMaxSplits splits every launch (a benchmark's sweep); unset or 0: as below.
  static const int fixed = env_int("DSINFER_CUDA_V4_SPLITS", 0, 0, kMaxSplits);
  if (fixed > 0) return fixed;
  const int64_t blocks = std::max<int64_t>(T * H, 1), target = 2 * static_cast<int64_t>(device_sm_count(132));
  if (blocks >= target) return 1;
  return static_cast<int>(std::min<int64_t>(kMaxSplits, (target + blocks - 1) / blocks));
}

int64_t attention_v4_partial_floats(int64_t T, int64_t H, int64_t D, int splits) {
  return splits > 1 ? T * H * splits * (D + 2) : 0;
}

void launch_attention_v4(const AttentionV4Args& a) {
  if (a.T == 0 || a.H == 0) return;
  DSI_CHECK(a.D > 0 && a.D <= kMaxV4HeadDim && a.D % kVec == 0, "attention_v4: head dim ", a.D,
            " (a multiple of ", kVec, ", at most ", kMaxV4HeadDim, ")");
  DSI_CHECK(a.H <= int64_t{2147483647}, "attention_v4: ", a.H, " heads");
  DSI_CHECK(!a.comp.data || a.comp.bf16 == a.window_rows.bf16,
            "attention_v4: the window and compressed rows must share a cache dtype");
  DSI_CHECK(a.ratio > 0, "attention_v4: ratio must be positive");
  DSI_CHECK(!a.unrope_inv_freq || (a.unrope_dim >= 2 && a.unrope_dim % 2 == 0 && a.unrope_dim <= a.D),
            "attention_v4: inverse rope over ", a.unrope_dim, " of ", a.D, " dims");
  DSI_CHECK(a.splits >= 1 && a.splits <= kMaxSplits, "attention_v4: ", a.splits, " splits (1 to ", kMaxSplits,
            ")");
  DSI_CHECK(a.splits == 1 || (a.partial && a.T <= kMaxGridY), "attention_v4: ", a.splits,
            " splits need partial state for at most ", kMaxGridY, " tokens");
  const unsigned z = static_cast<unsigned>(a.splits);
  for (int64_t t0 = 0; t0 < a.T; t0 += kMaxGridY) {
    const dim3 grid(static_cast<unsigned>(a.H), static_cast<unsigned>(std::min(kMaxGridY, a.T - t0)), z);
    if (a.window_rows.bf16) {
      launch_pdl(attention_v4_kernel<__nv_bfloat16>, grid, kAttnThreads, 0, a, t0);
    } else {
      launch_pdl(attention_v4_kernel<float>, grid, kAttnThreads, 0, a, t0);
    }
    check_launch("attention_v4");
  }
  if (a.splits > 1) {
    const dim3 grid(static_cast<unsigned>(a.H), static_cast<unsigned>(a.T));
    launch_pdl(attention_v4_merge_kernel, grid, kAttnThreads, 0, static_cast<const float*>(a.partial), a.out,
               a.T, a.H, static_cast<int>(a.D), a.splits, a.plan.positions, a.unrope_inv_freq, a.unrope_dim,
               a.unrope_scaling);
    check_launch("attention_v4_merge");
  }
}

}  // namespace dsinfer::cuda
