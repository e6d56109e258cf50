// Register-resident split-KV decode: each warp streams its own cache rows straight from global memory
// (16-byte loads; D / 8 lanes per row, so one warp reads 32 * 16 bytes per step) and keeps a private online
// softmax for up to 8 q heads of the kv group in registers (q pre-scaled, scores reduced across the row's
// lanes with shuffles). The next rows' block-table slots are fetched while the current rows are used, and
// each lane has U rows of K and V in flight. No barriers until the end, where the rows of a warp merge by
// shuffles and the 4 warps through shared memory. Launch geometry comes from the caller (split plan of
// decode_attention_kernels.cu), so it depends on max_context only. With arrival counters the last split CTA
// of a (query, head chunk) merges the splits itself (decode_merge.cuh) instead of the combine kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/decode_attention_warp.h"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
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

template <int D, int GMAX>
__global__ void __launch_bounds__(kThreads)
    decode_warp_kernel(const float* __restrict__ q, const __nv_bfloat16* __restrict__ cache, int64_t width,
                       DevicePlanView plan, const int32_t* tokens, int num_queries, float* out,
                       float* partials, int32_t* arrivals, int Hq, int Hkv, float scale_log2, int splits,
                       int chunk) {
  pdl_wait();
  pdl_trigger();
  constexpr int LPR = D / 8;            // lanes per cache row (8 values each)
  constexpr int RPW = 32 / LPR;         // rows a warp reads per step
  constexpr int U = GMAX >= 8 ? 2 : 4;  // steps in flight per iteration
  constexpr int ROWS = kWarps * U * RPW;
  __shared__ float acc_s[kWarps][GMAX][D];
  __shared__ float m_sh[kWarps][GMAX], l_sh[kWarps][GMAX];
  __shared__ MergeSmem merge_s;

  const int G = Hq / Hkv;
  const int nhc = (G + GMAX - 1) / GMAX;
  const int i = blockIdx.x, kvh = blockIdx.y / nhc, hc = blockIdx.y % nhc, sp = blockIdx.z;
  const int h0 = kvh * G + hc * GMAX;
  const int gc = min(GMAX, G - hc * GMAX);  // heads of this CTA
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPR, li = lane % LPR;
  const int t = tokens ? tokens[i] : i;
  const int ctx = plan.positions[t] + 1;
  const int begin = sp * chunk, end = min(ctx, begin + chunk);
  float* lse = partials + static_cast<int64_t>(num_queries) * Hq * splits * D;
  // Fused combine (splits > 1): the last split CTA of the (query, head chunk) merges all splits.
  auto finish = [&] {
    if (arrivals && arrive_last(arrivals + static_cast<int64_t>(i) * gridDim.y + blockIdx.y, splits, merge_s))
      merge_heads(partials, lse, i, Hq, h0, gc, D, splits, out + static_cast<int64_t>(t) * Hq * D, merge_s);
  };
  if (begin >= end) {  // a split past this query's context
    for (int g = threadIdx.x; g < gc; g += kThreads)
      lse[(static_cast<int64_t>(i) * Hq + h0 + g) * splits + sp] = -INFINITY;
    finish();
    return;
  }
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  const int bs = static_cast<int>(plan.block_size);

  float qr[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < gc) {
      const float4* src =
          reinterpret_cast<const float4*>(q + (static_cast<int64_t>(t) * Hq + h0 + g) * D + li * 8);
      const float4 a = src[0], b = src[1];
      qr[g][0] = a.x * scale_log2, qr[g][1] = a.y * scale_log2, qr[g][2] = a.z * scale_log2;
      qr[g][3] = a.w * scale_log2, qr[g][4] = b.x * scale_log2, qr[g][5] = b.y * scale_log2;
      qr[g][6] = b.z * scale_log2, qr[g][7] = b.w * scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qr[g][e] = 0.0f;
    }
  }
  float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = kNoScore;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
  const int64_t kcol = static_cast<int64_t>(kvh) * D + li * 8;
  const int64_t vcol = static_cast<int64_t>(Hkv) * D + static_cast<int64_t>(kvh) * D + li * 8;
  const int lane_row = warp * U * RPW + sub;  // row of step u: n0 + lane_row + u * RPW
  int64_t slot[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int p = begin + lane_row + u * RPW;
    slot[u] = p < end ? static_cast<int64_t>(blocks[p / bs]) * bs + p % bs : -1;
  }

  for (int n0 = begin; n0 < end; n0 += ROWS) {
    uint4 kr[U], vr[U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      valid[u] = slot[u] >= 0;
      if (valid[u]) {
        const __nv_bfloat16* row = cache + slot[u] * width;
        kr[u] = __ldg(reinterpret_cast<const uint4*>(row + kcol));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(row + vcol));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
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
    } else {
      partials[((static_cast<int64_t>(i) * Hq + h) * splits + sp) * D + d] = o / total;
      if (d == 0) lse[(static_cast<int64_t>(i) * Hq + h) * splits + sp] = mx + log2f(total);
    }
  }
  if (splits > 1) finish();
}

template <int D, int GMAX>
void launch_typed(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                  const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                  int64_t splits, int64_t chunk, float* partials, int32_t* arrivals) {
  const int64_t G = shape.Hq / shape.Hkv, nhc = (G + GMAX - 1) / GMAX;
  const dim3 grid(static_cast<unsigned>(num_queries), static_cast<unsigned>(shape.Hkv * nhc),
                  static_cast<unsigned>(splits));
  launch_pdl(decode_warp_kernel<D, GMAX>, grid, kThreads, 0, q, static_cast<const __nv_bfloat16*>(cache.data),
             cache.width, plan, tokens, static_cast<int>(num_queries), out, partials, arrivals,
             static_cast<int>(shape.Hq), static_cast<int>(shape.Hkv), shape.scale * 1.4426950408889634f,
             static_cast<int>(splits), static_cast<int>(chunk));
  attn::check_launch("attention_decode (warp kernel)");
}

template <int D>
void launch_for_dim(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                    const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                    int64_t splits, int64_t chunk, float* partials, int32_t* arrivals, int max_heads) {
  const int64_t G = std::min<int64_t>(shape.Hq / shape.Hkv, max_heads);  // heads per CTA
  if (G <= 1) {
    launch_typed<D, 1>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals);
  } else if (G <= 2) {
    launch_typed<D, 2>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals);
  } else if (G <= 4) {
    launch_typed<D, 4>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals);
  } else {
    launch_typed<D, 8>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals);
  }
}

}  // namespace

bool decode_warp_supported(const GqaShape& s, bool bf16_cache) {
  if (!bf16_cache || s.Hkv <= 0 || s.Hq % s.Hkv != 0 || s.D != s.Dv) return false;
  if (s.D != 64 && s.D != 128 && s.D != 256) return false;
  const int64_t G = s.Hq / s.Hkv;
  return s.Hkv * ((G + 7) / 8) <= 65535;
}

void launch_decode_warp(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                        const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                        int64_t splits, int64_t chunk, float* partials, int32_t* arrivals, int max_heads) {
  DSI_CHECK(decode_warp_supported(shape, cache.bf16), "attention decode: the warp kernel does not take D ",
            shape.D, " / Dv ", shape.Dv);
  DSI_CHECK(max_heads >= 1, "attention decode: max_heads ", max_heads);
  if (shape.D == 64) {
    launch_for_dim<64>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals,
                       max_heads);
  } else if (shape.D == 128) {
    launch_for_dim<128>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals,
                        max_heads);
  } else {
    launch_for_dim<256>(q, cache, plan, tokens, num_queries, out, shape, splits, chunk, partials, arrivals,
                        max_heads);
  }
}

}  // namespace dsinfer::cuda::detail
