// Register-resident split-KV decode: each warp streams its own cache rows straight from global memory
// (16-byte loads; D / 8 lanes per row, so one warp reads 32 * 16 bytes per step) and keeps a private online
// softmax for up to 8 q heads of the kv group in registers (q pre-scaled, scores reduced across the row's
// lanes with shuffles). The next rows' block-table slots are fetched while the current rows are used, and
// each lane has U rows of K and V in flight. No barriers until the end, where the rows of a warp merge by
// shuffles and the 4 warps through shared memory. Launch geometry comes from the caller (split plan of
// decode_attention_kernels.cu), so it depends on max_context only. With arrival counters the last split CTA
// of a (query, head chunk) merges the splits itself (decode_merge.cuh) instead of the combine kernel; on the
// Hopper path, with at most 8 splits, the splits of a (query, head chunk) run as one thread block cluster and
// merge through distributed shared memory instead (decode_cluster_merge.cuh: same bits, no arrival).
// The ROPE instantiations also do the step's rope + cache write (DecodeRopeArgs): the cache rows of earlier
// positions are loaded and the angles computed (once per CTA, in shared memory) before the PDL wait, then q
// is rotated in registers and the new token's K/V row is built, used and stored (rope_device.cuh's
// arithmetic, so the bits of rope_write_kv + attention). While GEMV stamps are on (gemv_stamps.h) the launch
// runs the STAMPS instance, whose CTAs record their timeline in a stamp slot (same bits).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/decode_attention_warp.h"
#include "backend/cuda/decode_cluster_merge.cuh"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda::detail {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr float kNoScore = -1e30f;  // running max before the first row: finite, so no inf - inf

__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __bfloat1622float2(h[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

__device__ __forceinline__ uint4 float8_to_bf16x8(const float (&f)[8]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) h[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
  return raw;
}

// The rotation of one lane's 8 dims [d0, d0 + 8) of a head at one position.
struct LaneRope {
  float c[8], s[8];  // cos, and sin signed as rope_math::rotate takes it
  int partner;       // half layout: offset of the partner dims (+half or -half); 0: interleaved (e ^ 1)
  int rotated;       // dims d0 + e with e < rotated rotate
};

// cs: the CTA's (cos, sin) of every frequency index (rope_math::cos_sin, one thread each).
// half: rope_dim / 2.
__device__ __forceinline__ LaneRope lane_rope(int half, bool interleaved, int d0, const float2* cs) {
  LaneRope L;
  const int end = 2 * half;
  L.rotated = max(0, min(8, end - d0));
  L.partner = !interleaved && d0 < end ? (d0 < half ? half : -half) : 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int d = d0 + e;
    const bool first = interleaved ? d % 2 == 0 : d < half;
    const int i = interleaved ? d / 2 : (first ? d : d - half);
    const float2 v = d < end ? cs[i] : make_float2(1.0f, 0.0f);
    L.c[e] = v.x;
    L.s[e] = first ? -v.y : v.y;
  }
  return L;
}

// A lane's 8 dims of head row x (float32, D values), rotated.
__device__ __forceinline__ void load_rotated(const float* x, int d0, const LaneRope& L, float (&y)[8]) {
  float own[8], par[8];
  load8(x + d0, own);
  if (L.partner != 0) {
    load8(x + d0 + L.partner, par);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) par[e] = own[e ^ 1];
  }
#pragma unroll
  for (int e = 0; e < 8; ++e)
    y[e] = e < L.rotated ? rope_math::rotate(own[e], par[e], L.c[e], L.s[e]) : own[e];
}

template <int D, int GMAX, bool ROPE, bool STAMPS>
__global__ void __launch_bounds__(kThreads)
    decode_warp_kernel(const float* __restrict__ q, const __nv_bfloat16* __restrict__ cache, int64_t width,
                       DevicePlanView plan, const int32_t* tokens, int num_queries, float* out,
                       float* partials, int32_t* arrivals, int Hq, int Hkv, float scale_log2, int splits,
                       int chunk, DecodeRopeArgs rope, bool cluster, uint64_t* stamps) {
  // STAMPS: thread 0 records the GPU's clock at six points into the launch's stamp slot (gemv_stamps.h:
  // start, rows issued before the wait, waited, rows scored, the CTA's warps merged, end).
  auto st = [&](int point) {
    if constexpr (STAMPS) {
      if (threadIdx.x == 0) {
        const int64_t cta =
            blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
        uint64_t now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        stamps[cta * kGemvStampFields + point] = now;
      }
    }
  };
  st(kStampStart);
  // Without the fused rope, the new rows were written by the kernel before: wait for it first. With it, the
  // plan (uploaded before the step's first kernel) and the rows of earlier steps are read before the wait.
  if constexpr (!ROPE) {
    pdl_wait();
    pdl_trigger();
  }
  constexpr int LPR = D / 8;            // lanes per cache row (8 values each)
  constexpr int RPW = 32 / LPR;         // rows a warp reads per step
  constexpr int U = GMAX >= 8 ? 2 : 4;  // steps in flight per iteration
  constexpr int ROWS = kWarps * U * RPW;
  __shared__ float acc_s[kWarps][GMAX][D];
  __shared__ float m_sh[kWarps][GMAX], l_sh[kWarps][GMAX];
  __shared__ MergeSmem merge_s;
  __shared__ float2 rope_cs[ROPE ? D / 2 : 1];  // the fused rope's (cos, sin) per frequency index
  // cluster (the splits are one cluster): the outputs this CTA merges and every split's lse values, stored
  // here by the cluster's CTAs (decode_cluster_merge.cuh).
  __shared__ ClusterInbox<GMAX, D> inbox;

  const int G = Hq / Hkv;
  const int nhc = (G + GMAX - 1) / GMAX;
  const int i = blockIdx.x, kvh = blockIdx.y / nhc, hc = blockIdx.y % nhc, sp = blockIdx.z;
  const int h0 = kvh * G + hc * GMAX;
  const int gc = min(GMAX, G - hc * GMAX);  // heads of this CTA
  if (cluster) cluster_inbox_open<GMAX, D>(inbox, gc, splits);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPR, li = lane % LPR;
  const int t = tokens ? tokens[i] : i;
  const int ctx = plan.positions[t] + 1;
  const int begin = sp * chunk, end = min(ctx, begin + chunk);
  float* lse = partials + static_cast<int64_t>(num_queries) * Hq * splits * D;
  // Fused combine (splits > 1): the cluster's CTAs merge together, or the last split CTA of the (query, head
  // chunk) to arrive merges all splits.
  auto finish = [&] {
    if (cluster) {
      cluster_push_merge<GMAX, D>(inbox, splits, gc, h0, out + static_cast<int64_t>(t) * Hq * D);
    } else if (arrivals &&
               arrive_last(arrivals + static_cast<int64_t>(i) * gridDim.y + blockIdx.y, splits, merge_s))
      merge_heads(partials, lse, i, Hq, h0, gc, D, splits, out + static_cast<int64_t>(t) * Hq * D, merge_s);
  };
  if (begin >= end) {  // a split past this query's context
    if constexpr (ROPE) {
      pdl_wait();
      pdl_trigger();
    }
    st(kStampIssued);
    st(kStampWaited);
    st(kStampConsumed);
    st(kStampLastIssue);
    if (cluster) {
      cluster_wait_started();
      cluster_push_empty<GMAX, D>(inbox, sp, splits, gc);
    } else {
      for (int g = threadIdx.x; g < gc; g += kThreads)
        lse[(static_cast<int64_t>(i) * Hq + h0 + g) * splits + sp] = -INFINITY;
    }
    finish();
    st(kStampEnd);
    return;
  }
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  const int bs = static_cast<int>(plan.block_size);

  const int64_t kcol = static_cast<int64_t>(kvh) * D + li * 8;
  const int64_t vcol = static_cast<int64_t>(Hkv) * D + static_cast<int64_t>(kvh) * D + li * 8;
  const int lane_row = warp * U * RPW + sub;  // row of step u: n0 + lane_row + u * RPW
  const int newest = ROPE ? ctx - 1 : -1;     // the fused rope's new row: built, not loaded
  int64_t slot[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int p = begin + lane_row + u * RPW;
    slot[u] = p < end ? static_cast<int64_t>(blocks[p / bs]) * bs + p % bs : -1;
  }
  uint4 kr[U], vr[U];
  auto load_rows = [&](int n0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (slot[u] >= 0 && n0 + lane_row + u * RPW != newest) {
        const __nv_bfloat16* row = cache + slot[u] * width;
        kr[u] = __ldg(reinterpret_cast<const uint4*>(row + kcol));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(row + vcol));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  LaneRope lr{};
  if constexpr (ROPE) {  // the angles once per CTA, in shared memory before the wait
    const int half = static_cast<int>(rope.rope_dim / 2);
    for (int f = threadIdx.x; f < half; f += kThreads) {
      float c, sn;
      rope_math::cos_sin(rope.inv_freq[f], static_cast<float>(ctx - 1), rope.attention_scaling, c, sn);
      rope_cs[f] = make_float2(c, sn);
    }
    __syncthreads();
    lr = lane_rope(half, rope.interleaved, li * 8, rope_cs);
  }
  load_rows(begin);
  st(kStampIssued);
  if constexpr (ROPE) {
    pdl_wait();
    pdl_trigger();
  }
  st(kStampWaited);

  float qr[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < gc) {
      const float* src = q + (static_cast<int64_t>(t) * Hq + h0 + g) * D;
      float x[8];
      if constexpr (ROPE) {
        load_rotated(src, li * 8, lr, x);
      } else {
        load8(src + li * 8, x);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) qr[g][e] = x[e] * scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qr[g][e] = 0.0f;
    }
  }
  // The new token's K (rotated) and V parts of this lane, as bf16, when this split holds its position.
  uint4 knew = make_uint4(0, 0, 0, 0), vnew = knew;
  if (ROPE && newest >= begin && newest < end) {
    const int64_t head = static_cast<int64_t>(t) * Hkv + kvh;
    float x[8];
    load_rotated(rope.k + head * D, li * 8, lr, x);
    knew = float8_to_bf16x8(x);
    load8(rope.v + head * D + li * 8, x);
    vnew = float8_to_bf16x8(x);
  }
  float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = kNoScore;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
  for (int n0 = begin; n0 < end; n0 += ROWS) {
    if (n0 != begin) load_rows(n0);
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      valid[u] = slot[u] >= 0;
      // The new row, in the split that holds it: with ROWS > chunk (D 64) a split's last step also names rows
      // of the next split, which it must neither use nor store.
      if (ROPE && valid[u] && n0 + lane_row + u * RPW == newest) {
        kr[u] = knew;
        vr[u] = vnew;
        if (hc == 0) {  // one head chunk stores the row (the others build the same bits)
          __nv_bfloat16* row = const_cast<__nv_bfloat16*>(cache) + rope.slot_mapping[t] * width;
          *reinterpret_cast<uint4*>(row + kcol) = knew;
          *reinterpret_cast<uint4*>(row + vcol) = vnew;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {  // the next iteration's slots, in flight during this one's math
      const int p = n0 + ROWS + lane_row + u * RPW;
      slot[u] = p < end ? static_cast<int64_t>(blocks[p / bs]) * bs + p % bs : -1;
    }
    float s[U][GMAX];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float k[8];
      bf16x8_to_float(kr[u], k);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += qr[g][e] * k[e];
#pragma unroll
        for (int off = LPR / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        s[u][g] = valid[u] ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][g]);
      const float corr = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float v[8];
      bf16x8_to_float(vr[u], v);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        const float p = exp2f(s[u][g] - m[g]);  // 0 for rows past the end
        l[g] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] += p * v[e];
      }
    }
  }

  st(kStampConsumed);
  // Merge the warp's rows (lanes li of different sub), then the warps.
#pragma unroll
  for (int off = LPR; off < 32; off *= 2) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mx = fmaxf(m[g], mo);
      const float a = exp2f(m[g] - mx), b = exp2f(mo - mx);
      l[g] = l[g] * a + lo * b;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[g][e] = acc[g][e] * a + __shfl_xor_sync(0xffffffffu, acc[g][e], off) * b;
      m[g] = mx;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc_s[warp][g][li * 8 + e] = acc[g][e];
      if (li == 0) {
        m_sh[warp][g] = m[g];
        l_sh[warp][g] = l[g];
      }
    }
  }
  __syncthreads();
  st(kStampLastIssue);
  if (cluster) cluster_wait_started();
  const int per = cluster_push_per(gc, D, splits);
  for (int idx = threadIdx.x; idx < gc * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mx = m_sh[0][g];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, m_sh[w][g]);
    float total = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp2f(m_sh[w][g] - mx);  // 0 for warps that saw no row
      total += l_sh[w][g] * wt;
      o += acc_s[w][g][d] * wt;
    }
    const int64_t h = h0 + g;
    if (splits == 1) {
      out[(static_cast<int64_t>(t) * Hq + h) * D + d] = o / total;
    } else if (cluster) {
      cluster_push<GMAX, D>(inbox, sp, splits, per, idx, o / total, d == 0 ? mx + log2f(total) : 0.0f);
    } else {
      partials[((static_cast<int64_t>(i) * Hq + h) * splits + sp) * D + d] = o / total;
      if (d == 0) lse[(static_cast<int64_t>(i) * Hq + h) * splits + sp] = mx + log2f(total);
    }
  }
  if (splits > 1) finish();
  st(kStampEnd);
}

// The launch's arguments past the shape.
struct WarpLaunch {
  int64_t splits, chunk;
  float* partials;
  int32_t* arrivals;
  const DecodeRopeArgs* rope;
  bool cluster;  // the splits of a (query, head chunk) as one cluster (decode_cluster_merge.cuh)
};

template <int D, int GMAX, bool ROPE>
void launch_typed(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                  const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                  const WarpLaunch& a) {
  const int64_t G = shape.Hq / shape.Hkv, nhc = (G + GMAX - 1) / GMAX;
  const dim3 grid(static_cast<unsigned>(num_queries), static_cast<unsigned>(shape.Hkv * nhc),
                  static_cast<unsigned>(a.splits));
  const DecodeRopeArgs rope = ROPE ? *a.rope : DecodeRopeArgs{};
  const dim3 cluster(1, 1, a.cluster ? static_cast<unsigned>(a.splits) : 1u);
  // With GEMV stamps on (gemv_stamps.h) the launch takes a stamp slot as a launch of 1 row and K = D.
  uint64_t* stamps = next_gemv_stamp_slot(1, D, false, static_cast<int64_t>(grid.x) * grid.y * grid.z, 0);
  auto launch = [&](auto kernel) {
    launch_pdl_cluster(kernel, grid, kThreads, 0, cluster, q, static_cast<const __nv_bfloat16*>(cache.data),
                       cache.width, plan, tokens, static_cast<int>(num_queries), out, a.partials, a.arrivals,
                       static_cast<int>(shape.Hq), static_cast<int>(shape.Hkv),
                       shape.scale * 1.4426950408889634f, static_cast<int>(a.splits),
                       static_cast<int>(a.chunk), rope, a.cluster, stamps);
  };
  if (stamps) {
    launch(decode_warp_kernel<D, GMAX, ROPE, true>);
  } else {
    launch(decode_warp_kernel<D, GMAX, ROPE, false>);
  }
  attn::check_launch(ROPE ? "attention_decode (warp kernel, fused rope)" : "attention_decode (warp kernel)");
}

template <int D, int GMAX>
void launch_heads(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                  const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                  const WarpLaunch& a) {
  if (a.rope) {
    launch_typed<D, GMAX, true>(q, cache, plan, tokens, num_queries, out, shape, a);
  } else {
    launch_typed<D, GMAX, false>(q, cache, plan, tokens, num_queries, out, shape, a);
  }
}

template <int D>
void launch_for_dim(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                    const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                    const WarpLaunch& a, int max_heads) {
  const int64_t G = std::min<int64_t>(shape.Hq / shape.Hkv, max_heads);  // heads per CTA
  if (G <= 1) {
    launch_heads<D, 1>(q, cache, plan, tokens, num_queries, out, shape, a);
  } else if (G <= 2) {
    launch_heads<D, 2>(q, cache, plan, tokens, num_queries, out, shape, a);
  } else if (G <= 4) {
    launch_heads<D, 4>(q, cache, plan, tokens, num_queries, out, shape, a);
  } else {
    launch_heads<D, 8>(q, cache, plan, tokens, num_queries, out, shape, a);
  }
}

}  // namespace

namespace {
bool& cluster_merge_switch() {
  static bool on = env_switch("DSINFER_CUDA_DECODE_CLUSTER", true);
  return on;
}
}  // namespace

bool decode_cluster_merge_enabled() {
  // The Hopper path runs only on compute capability 9.x (arch_path.h), which has clusters.
  return cluster_merge_switch() && arch_path() == ArchPath::kHopper;
}

bool decode_warp_supported(const GqaShape& s, bool bf16_cache) {
  if (!bf16_cache || s.Hkv <= 0 || s.Hq % s.Hkv != 0 || s.D != s.Dv) return false;
  if (s.D != 64 && s.D != 128 && s.D != 256) return false;
  const int64_t G = s.Hq / s.Hkv;
  return s.Hkv * ((G + 7) / 8) <= 65535;
}

void launch_decode_warp(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                        const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                        int64_t splits, int64_t chunk, float* partials, int32_t* arrivals, int max_heads,
                        const DecodeRopeArgs* rope) {
  DSI_CHECK(decode_warp_supported(shape, cache.bf16), "attention decode: the warp kernel does not take D ",
            shape.D, " / Dv ", shape.Dv);
  DSI_CHECK(max_heads >= 1, "attention decode: max_heads ", max_heads);
  // (launch_attention_decode checked the fused rope's shape)
  DSI_CHECK(!rope || !tokens, "attention decode: the fused rope takes every token of the step in order");
  const bool cluster =
      arrivals != nullptr && splits > 1 && splits <= kMaxClusterSplits && decode_cluster_merge_enabled();
  const WarpLaunch a{splits, chunk, partials, arrivals, rope, cluster};
  if (shape.D == 64) {
    launch_for_dim<64>(q, cache, plan, tokens, num_queries, out, shape, a, max_heads);
  } else if (shape.D == 128) {
    launch_for_dim<128>(q, cache, plan, tokens, num_queries, out, shape, a, max_heads);
  } else {
    launch_for_dim<256>(q, cache, plan, tokens, num_queries, out, shape, a, max_heads);
  }
}

}  // namespace dsinfer::cuda::detail

namespace dsinfer::cuda {

bool decode_cluster_merge() {
  return detail::cluster_merge_switch();
}

void decode_set_cluster_merge(bool on) {
  detail::cluster_merge_switch() = on;
}

}  // namespace dsinfer::cuda
