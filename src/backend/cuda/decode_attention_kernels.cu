// Split-KV paged GQA for decode (and any query whose shape the flash kernel does not take): the split plan,
// the combine kernel, and the generic kernel for shapes the register-resident warp kernel
// (decode_attention_warp.cu: bf16 cache, D == Dv in {64, 128, 256}) does not take. Generic kernel: one CTA
// per (query, kv head, context split) holds the Hq / Hkv query heads of its group: per tile of 32 positions
// it copies the tile's K and V rows (16-byte cp.async, float32 or bf16 cache; slots looked up once per tile,
// the next tile's copy in flight while this one is used) into shared memory, scores every (head, position),
// runs the online softmax (one warp per head) and accumulates P V in shared memory. With several splits each
// CTA writes its normalised partial output and log-sum-exp, and either a second kernel merges them or (fused,
// given arrival counters) the last CTA of the (query, group) to finish does (decode_merge.cuh). The grid
// depends only on the query count, the shape and max_context (CUDA-graph friendly): splits past a query's
// context exit at once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/decode_attention_warp.h"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using attn::check_launch;
using attn::cp_async16;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;         // positions per shared-memory tile (one per lane in the softmax)
constexpr int kMaxSplits = 32;    // context splits of one query (kMaxDecodeSplits when few pairs)
constexpr int kMinSplitLen = 64;  // positions a split covers at least (kTile when few pairs)
// Q heads per warp-kernel CTA: few pairs (batch-1 decode) take two, so that the 8B's 128 CTAs (one an SM)
// are resident, their K/V rows loaded, before qkv ends (with one head, 256 CTAs started only as qkv's blocks
// left). With the st.async cluster merge, 8B batch 1 on the H200: 3.993 / 3.991 ms/token against 3.998 /
// 4.000 with one head, and 3.996 / 3.987 against 4.003 / 4.003 in a build with an unlanded step-boundary
// patch (thirtieth session, runs 1 and 2; with the pull merge of the twentieth, two heads were 10 us slower).
// Otherwise up to the kernel's 8.
constexpr int kFewPairsMaxHeads = 2;
constexpr int kMaxHeads = 8;
constexpr int kMaxSmem = 160 << 10;  // dynamic shared memory the kernel may ask for (sm_80: 163 KiB)

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int num_sms() {
  return device_sm_count(108);
}

// Elements of a cache row per 16 bytes.
template <typename KV>
constexpr int kVec = 16 / static_cast<int>(sizeof(KV));

template <typename KV>
int64_t smem_bytes(const GqaShape& s) {
  const int64_t G = s.Hq / s.Hkv;
  const int64_t kv = 2 * kTile * (s.D + kVec<KV> + s.Dv + kVec<KV>);  // two buffers of K and V rows
  return 2 * kTile * 8 + kv * static_cast<int64_t>(sizeof(KV)) + (G * s.D + G * kTile + G * s.Dv + 3 * G) * 4;
}

struct SplitPlan {
  int64_t splits = 1;
  int64_t chunk = 0;  // positions per split (multiple of kTile)
  bool few = false;   // few (query, kv head) pairs: the warp kernel also splits a group's heads finer
};

SplitPlan split_plan(int64_t num_queries, const GqaShape& s, int64_t max_context) {
  // Queries rounded up to a power of two, as mla_choose_split does: eager and graph-padded batches split
  // alike.
  const int64_t work = std::max<int64_t>(next_pow2(num_queries) * s.Hkv, 1);
  // Few (query, kv head) pairs (batch-1 decode): more, shorter splits, so that more SMs stream K/V.
  const bool few = 4 * work <= num_sms();
  const int64_t by_len = ceil_div(max_context, few ? kTile : kMinSplitLen);
  const int64_t want = ceil_div(4 * num_sms(), work);  // CTAs for ~4 per SM
  const int64_t splits = std::clamp<int64_t>(std::min(by_len, want), 1, few ? kMaxDecodeSplits : kMaxSplits);
  SplitPlan p;
  p.chunk = ceil_div(ceil_div(max_context, splits), kTile) * kTile;
  p.splits = ceil_div(max_context, p.chunk);
  p.few = few;
  return p;
}

// dot(q[0..E), k[0..E)) for one 16-byte chunk of a cache row in shared memory.
__device__ __forceinline__ float dot_chunk(const float* q, const float* k) {
  const float4 a = *reinterpret_cast<const float4*>(q);
  const float4 b = *reinterpret_cast<const float4*>(k);
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ float dot_chunk(const float* q, const __nv_bfloat16* k) {
  const uint4 raw = *reinterpret_cast<const uint4*>(k);
  const __nv_bfloat162* kk = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const float4 a = *reinterpret_cast<const float4*>(q);
  const float4 b = *reinterpret_cast<const float4*>(q + 4);
  const float2 k0 = __bfloat1622float2(kk[0]), k1 = __bfloat1622float2(kk[1]);
  const float2 k2 = __bfloat1622float2(kk[2]), k3 = __bfloat1622float2(kk[3]);
  return a.x * k0.x + a.y * k0.y + a.z * k1.x + a.w * k1.y + b.x * k2.x + b.y * k2.y + b.z * k3.x +
         b.w * k3.y;
}

__device__ __forceinline__ float2 load2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// partials: [num_queries, Hq, splits, Dv] outputs, then [num_queries, Hq, splits] log2-sum-exp values.
template <typename KV>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const float* q, const KV* cache, int64_t width, DevicePlanView plan, const int32_t* tokens,
                  int num_queries, float* out, float* partials, int32_t* arrivals, int Hq, int Hkv, int D,
                  int Dv, float scale_log2, int splits, int chunk) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ detail::MergeSmem merge_s;
  constexpr int E = kVec<KV>;
  const int G = Hq / Hkv;
  const int ldk = D + E, ldv = Dv + E;
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem);   // [2, kTile] cache slot per position, -1 past the end
  KV* k_s = reinterpret_cast<KV*>(slot_s + 2 * kTile);  // [2, kTile, ldk]
  KV* v_s = k_s + 2 * kTile * ldk;                      // [2, kTile, ldv]
  float* q_s = reinterpret_cast<float*>(v_s + 2 * kTile * ldv);  // [G, D]
  float* s_s = q_s + G * D;                                      // [G, kTile] scores, then probabilities
  float* o_s = s_s + G * kTile;                                  // [G, Dv] unnormalised outputs
  float* m_s = o_s + G * Dv;                                     // [G] running max (log2 domain)
  float* l_s = m_s + G;                                          // [G] running sum
  float* c_s = l_s + G;                                          // [G] rescale factor of this tile

  const int i = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t = tokens ? tokens[i] : i;
  const int ctx = plan.positions[t] + 1;
  const int begin = sp * chunk, end = min(ctx, begin + chunk);
  const int h0 = kvh * G;
  float* lse = partials + static_cast<int64_t>(num_queries) * Hq * splits * Dv;
  // Fused combine (splits > 1): the last split CTA of the group merges all splits.
  auto finish = [&] {
    if (arrivals &&
        detail::arrive_last(arrivals + static_cast<int64_t>(i) * gridDim.y + blockIdx.y, splits, merge_s))
      detail::merge_heads(partials, lse, i, Hq, h0, G, Dv, splits, out + static_cast<int64_t>(t) * Hq * Dv,
                          merge_s);
  };
  if (begin >= end) {  // a split past this query's context
    for (int g = tid; g < G; g += kThreads)
      lse[(static_cast<int64_t>(i) * Hq + h0 + g) * splits + sp] = -INFINITY;
    finish();
    return;
  }
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  const int64_t bs = plan.block_size;
  // Slots of tile [n0, n0 + kTile) into slot_s[buf] (read by every thread after the next barrier).
  auto find_slots = [&](int buf, int n0) {
    for (int r = tid; r < kTile; r += kThreads) {
      const int p = n0 + r;
      slot_s[buf * kTile + r] = p < end ? static_cast<int64_t>(blocks[p / bs]) * bs + p % bs : -1;
    }
  };
  const int64_t kcol = static_cast<int64_t>(kvh) * D, vcol = static_cast<int64_t>(Hkv) * D + kvh * Dv;
  const int kvec = D / E, vvec = Dv / E;
  // 16-byte copies of the tile's K and V rows into buffer `buf` (zeros past the end), one commit group.
  auto load_tile = [&](int buf) {
    KV* kd = k_s + buf * kTile * ldk;
    KV* vd = v_s + buf * kTile * ldv;
    for (int idx = tid; idx < kTile * (kvec + vvec); idx += kThreads) {
      const bool is_k = idx < kTile * kvec;
      const int local = is_k ? idx : idx - kTile * kvec;
      const int per_row = is_k ? kvec : vvec;
      const int r = local / per_row, c = local % per_row;
      const int64_t slot = slot_s[buf * kTile + r];
      const KV* src = slot >= 0 ? cache + slot * width + (is_k ? kcol : vcol) + c * E : cache;
      cp_async16(is_k ? kd + r * ldk + c * E : vd + r * ldv + c * E, src, slot >= 0 ? 16 : 0);
    }
    attn::cp_async_commit();
  };

  find_slots(0, begin);
  const float* qt = q + (static_cast<int64_t>(t) * Hq + h0) * D;  // the group's heads are consecutive
  for (int idx = tid; idx < G * D; idx += kThreads) q_s[idx] = qt[idx];
  for (int idx = tid; idx < G * Dv; idx += kThreads) o_s[idx] = 0.0f;
  for (int g = tid; g < G; g += kThreads) {
    m_s[g] = -INFINITY;
    l_s[g] = 0.0f;
  }
  __syncthreads();
  load_tile(0);

  for (int n0 = begin, it = 0; n0 < end; n0 += kTile, ++it) {
    const int buf = it & 1;
    const bool more = n0 + kTile < end;
    if (more) find_slots(buf ^ 1, n0 + kTile);
    __syncthreads();
    if (more) {
      load_tile(buf ^ 1);  // overlaps this tile's math
      attn::cp_async_wait<1>();
    } else {
      attn::cp_async_wait<0>();
    }
    __syncthreads();
    const KV* kb = k_s + buf * kTile * ldk;
    const KV* vb = v_s + buf * kTile * ldv;
    const int jn = min(kTile, end - n0);

    for (int idx = tid; idx < G * kTile; idx += kThreads) {
      const int g = idx / kTile, j = idx % kTile;
      float s = -INFINITY;
      if (j < jn) {
        const float* qg = q_s + g * D;
        const KV* kj = kb + j * ldk;
        float dot0 = 0.0f, dot1 = 0.0f;  // two chains for more instruction-level parallelism
        int d = 0;
        for (; d + E < D; d += 2 * E) {
          dot0 += dot_chunk(qg + d, kj + d);
          dot1 += dot_chunk(qg + d + E, kj + d + E);
        }
        if (d < D) dot0 += dot_chunk(qg + d, kj + d);
        s = (dot0 + dot1) * scale_log2;
      }
      s_s[idx] = s;
    }
    __syncthreads();

    for (int g = warp; g < G; g += kWarps) {
      float* sg = s_s + g * kTile;
      const float a = sg[lane];  // kTile == 32: one position per lane
      float mx = a;
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, mx);  // finite: position n0 is in the tile
      const float pa = exp2f(a - m_new);
      sg[lane] = pa;
      float sum = pa;
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) {
        const float corr = exp2f(m_old - m_new);  // 0 on the first tile
        c_s[g] = corr;
        l_s[g] = l_s[g] * corr + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();

    const int half_dv = Dv / 2;
    for (int idx = tid; idx < G * half_dv; idx += kThreads) {
      const int g = idx / half_dv, d = (idx % half_dv) * 2;
      const float corr = c_s[g];
      float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
      const float* p = s_s + g * kTile;
      int j = 0;
      for (; j + 1 < jn; j += 2) {
        const float2 v = load2(vb + j * ldv + d), w = load2(vb + (j + 1) * ldv + d);
        a0 += p[j] * v.x;
        a1 += p[j] * v.y;
        b0 += p[j + 1] * w.x;
        b1 += p[j + 1] * w.y;
      }
      if (j < jn) {
        const float2 v = load2(vb + j * ldv + d);
        a0 += p[j] * v.x;
        a1 += p[j] * v.y;
      }
      o_s[g * Dv + d] = o_s[g * Dv + d] * corr + a0 + b0;
      o_s[g * Dv + d + 1] = o_s[g * Dv + d + 1] * corr + a1 + b1;
    }
    __syncthreads();
  }

  for (int idx = tid; idx < G * Dv; idx += kThreads) {
    const int g = idx / Dv, d = idx % Dv;
    const float o = o_s[idx] / l_s[g];
    const int64_t h = h0 + g;
    if (splits == 1) {
      out[(static_cast<int64_t>(t) * Hq + h) * Dv + d] = o;
    } else {
      partials[((static_cast<int64_t>(i) * Hq + h) * splits + sp) * Dv + d] = o;
    }
  }
  if (splits > 1) {
    for (int g = tid; g < G; g += kThreads)
      lse[(static_cast<int64_t>(i) * Hq + h0 + g) * splits + sp] = m_s[g] + log2f(l_s[g]);
    finish();
  }
}

// out[t, h] from the splits' partials (detail::merge_heads: the fused combine's merge, same bits).
__global__ void __launch_bounds__(kThreads)
    decode_combine_kernel(const float* partials, const int32_t* tokens, int num_queries, float* out, int Hq,
                          int Dv, int splits) {
  pdl_wait();
  pdl_trigger();
  __shared__ detail::MergeSmem merge_s;
  const int i = blockIdx.x, h = blockIdx.y;
  const int t = tokens ? tokens[i] : i;
  const float* lse = partials + static_cast<int64_t>(num_queries) * Hq * splits * Dv;
  detail::merge_heads(partials, lse, i, Hq, h, 1, Dv, splits, out + static_cast<int64_t>(t) * Hq * Dv,
                      merge_s);
}

template <typename KV>
void launch_decode_typed(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                         const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                         const SplitPlan& sp, float* partials, int32_t* arrivals) {
  const int64_t bytes = smem_bytes<KV>(shape);
  static int64_t opted_in = 48 << 10;  // per instantiation: the dynamic shared memory already allowed
  if (bytes > opted_in) {
    const cudaError_t err = cudaFuncSetAttribute(
        decode_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err != cudaSuccess)
      fail("attention decode: cannot use ", bytes, " bytes of shared memory: ", cudaGetErrorString(err));
    opted_in = bytes;
  }
  const dim3 grid(static_cast<unsigned>(num_queries), static_cast<unsigned>(shape.Hkv),
                  static_cast<unsigned>(sp.splits));
  const float scale_log2 = shape.scale * 1.4426950408889634f;
  launch_pdl(decode_kernel<KV>, grid, kThreads, bytes, q, static_cast<const KV*>(cache.data), cache.width,
             plan, tokens, static_cast<int>(num_queries), out, partials, arrivals, static_cast<int>(shape.Hq),
             static_cast<int>(shape.Hkv), static_cast<int>(shape.D), static_cast<int>(shape.Dv), scale_log2,
             static_cast<int>(sp.splits), static_cast<int>(sp.chunk));
  check_launch("attention_decode");
}

}  // namespace

bool decode_supported(const GqaShape& s, bool bf16_cache) {
  return s.Hkv > 0 && s.Hq % s.Hkv == 0 && s.Hkv <= 65535 && s.D > 0 && s.Dv > 0 && s.D % 8 == 0 &&
         s.Dv % 8 == 0 && s.D <= kMaxAttentionHeadDim && s.Dv <= kMaxAttentionHeadDim &&
         (bf16_cache ? smem_bytes<__nv_bfloat16>(s) : smem_bytes<float>(s)) <= kMaxSmem;
}

bool decode_rope_supported(const GqaShape& s, bool bf16_cache, int64_t rope_dim, bool interleaved) {
  return detail::decode_warp_supported(s, bf16_cache) && rope_dim >= 0 && rope_dim % 2 == 0 &&
         rope_dim <= s.D && (interleaved || (rope_dim / 2) % 8 == 0);
}

int64_t decode_splits(int64_t num_queries, const GqaShape& shape, int64_t max_context) {
  return split_plan(num_queries, shape, max_context).splits;
}

int64_t decode_partial_floats(int64_t num_queries, const GqaShape& shape, int64_t max_context) {
  const int64_t splits = decode_splits(num_queries, shape, max_context);
  return splits > 1 ? num_queries * shape.Hq * splits * (shape.Dv + 1) : 0;
}

int64_t decode_arrival_slots(int64_t num_queries, const GqaShape& shape, int64_t max_context) {
  // One per (query, CTA row of heads): Hkv rows (generic kernel) or Hkv * ceil(G / 8) <= Hq (warp kernel).
  return decode_splits(num_queries, shape, max_context) > 1 ? num_queries * shape.Hq : 0;
}

void launch_attention_decode(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                             const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                             int64_t max_context, float* partials, int32_t* arrivals,
                             const DecodeRopeArgs* rope) {
  DSI_CHECK(decode_supported(shape, cache.bf16), "attention decode: unsupported shape (Hq ", shape.Hq,
            ", Hkv ", shape.Hkv, ", D ", shape.D, ", Dv ", shape.Dv, ")");
  DSI_CHECK(!rope || decode_rope_supported(shape, cache.bf16, rope->rope_dim, rope->interleaved),
            "attention decode: the fused rope does not take this shape (D ", shape.D, ", rope_dim ",
            rope ? rope->rope_dim : 0, ")");
  DSI_CHECK(max_context > 0, "attention decode: max_context must be positive");
  if (num_queries == 0) return;
  const SplitPlan sp = split_plan(num_queries, shape, max_context);
  DSI_CHECK(sp.splits == 1 || partials, "attention decode: ", sp.splits, " splits need a partials buffer");
  if (sp.splits == 1) arrivals = nullptr;  // nothing to merge
  if (detail::decode_warp_supported(shape, cache.bf16)) {
    detail::launch_decode_warp(q, cache, plan, tokens, num_queries, out, shape, sp.splits, sp.chunk, partials,
                               arrivals, sp.few ? kFewPairsMaxHeads : kMaxHeads, rope);
  } else if (cache.bf16) {
    launch_decode_typed<__nv_bfloat16>(q, cache, plan, tokens, num_queries, out, shape, sp, partials,
                                       arrivals);
  } else {
    launch_decode_typed<float>(q, cache, plan, tokens, num_queries, out, shape, sp, partials, arrivals);
  }
  if (sp.splits > 1 && !arrivals) {
    const dim3 grid(static_cast<unsigned>(num_queries), static_cast<unsigned>(shape.Hq));
    launch_pdl(decode_combine_kernel, grid, kThreads, 0, partials, tokens, static_cast<int>(num_queries), out,
               static_cast<int>(shape.Hq), static_cast<int>(shape.Dv), static_cast<int>(sp.splits));
    check_launch("attention_decode_combine");
  }
}

}  // namespace dsinfer::cuda
