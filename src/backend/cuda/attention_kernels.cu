// Paged cache writes (float32 or bf16 cache) and the simple causal GQA kernel (the fallback for shapes the
// decode and flash kernels do not take): one block per (token, head), each warp runs an online softmax over
// every 4th cache position (lanes split the head dims), then the warps' partial states merge.
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kDimsPerLane = static_cast<int>(kMaxAttentionHeadDim / 32);

using attn::check_launch;
using attn::from_float;
using attn::to_float;

template <typename KV>
__global__ void write_kv_kernel(KV* cache, int64_t width, const int64_t* slot_mapping, const float* a,
                                int64_t wa, const float* b, int64_t wb) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  KV* row = cache + slot_mapping[t] * width;
  for (int64_t i = threadIdx.x; i < wa; i += blockDim.x) row[i] = from_float<KV>(a[t * wa + i]);
  for (int64_t i = threadIdx.x; i < wb; i += blockDim.x) row[wa + i] = from_float<KV>(b[t * wb + i]);
}

template <typename KV>
__global__ void __launch_bounds__(kWarps * 32)
    attention_gqa_kernel(const float* q, const KV* cache, int64_t width, DevicePlanView plan, float* out,
                         int Hq, int Hkv, int D, int Dv, float scale) {
  __shared__ float q_s[kMaxAttentionHeadDim];
  __shared__ float m_s[kWarps], l_s[kWarps];
  __shared__ float acc_s[kWarps][kMaxAttentionHeadDim];
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int kvh = h / (Hq / Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = q[(t * Hq + h) * D + d];
  __syncthreads();

  const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  float m = -INFINITY, l = 0.0f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
  for (int64_t j = warp; j < n; j += kWarps) {
    const int64_t slot =
        static_cast<int64_t>(blocks[j / plan.block_size]) * plan.block_size + j % plan.block_size;
    const KV* row = cache + slot * width;
    const KV* k = row + static_cast<int64_t>(kvh) * D;
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32) dot += q_s[d] * to_float(k[d]);
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * scale;
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new);  // 0 on the first position (m = -inf)
    const float p = expf(score - m_new);
    l = l * corr + p;
    const KV* v = row + static_cast<int64_t>(Hkv) * D + static_cast<int64_t>(kvh) * Dv;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = i * 32 + lane;
      if (d < Dv) acc[i] = acc[i] * corr + p * to_float(v[d]);
    }
    m = m_new;
  }
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = i * 32 + lane;
    if (d < Dv) acc_s[warp][d] = acc[i];
  }
  __syncthreads();

  // Merge: warp 0 always saw position 0, so the overall max is finite; idle warps (m = -inf) weigh 0.
  float m_all = m_s[0];
  for (int w = 1; w < kWarps; ++w) m_all = fmaxf(m_all, m_s[w]);
  float weight[kWarps];
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = m_s[w] == -INFINITY ? 0.0f : expf(m_s[w] - m_all);
    l_all += l_s[w] * weight[w];
  }
  const float inv = 1.0f / l_all;
  for (int d = threadIdx.x; d < Dv; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += acc_s[w][d] * weight[w];
    out[(t * Hq + h) * Dv + d] = o * inv;
  }
}

}  // namespace

void launch_write_kv(const DeviceCacheView& cache, const int64_t* slot_mapping, const float* a, int64_t wa,
                     const float* b, int64_t wb, int64_t T) {
  if (T == 0) return;
  if (!b) wb = 0;
  if (cache.bf16) {
    launch_pdl(write_kv_kernel<__nv_bfloat16>, static_cast<unsigned>(T), 256, 0,
               static_cast<__nv_bfloat16*>(cache.data), cache.width, slot_mapping, a, wa, b, wb);
  } else {
    launch_pdl(write_kv_kernel<float>, static_cast<unsigned>(T), 256, 0, static_cast<float*>(cache.data),
               cache.width, slot_mapping, a, wa, b, wb);
  }
  check_launch("write_kv");
}

void launch_attention_gqa(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                          float* out, int64_t T, const GqaShape& shape) {
  const int64_t Hq = shape.Hq, Hkv = shape.Hkv, D = shape.D, Dv = shape.Dv;
  DSI_CHECK(D > 0 && Dv > 0 && D <= kMaxAttentionHeadDim && Dv <= kMaxAttentionHeadDim,
            "attention_gqa: head dims ", D, "/", Dv, " (the CUDA kernel takes up to ", kMaxAttentionHeadDim,
            ")");
  DSI_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention_gqa: ", Hq, " query heads for ", Hkv, " kv heads");
  DSI_CHECK(Hq <= 65535 || T == 0, "attention_gqa: too many heads");
  if (T == 0) return;
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(Hq));
  if (cache.bf16) {
    attention_gqa_kernel<<<grid, kWarps * 32, 0, stream()>>>(
        q, static_cast<const __nv_bfloat16*>(cache.data), cache.width, plan, out, static_cast<int>(Hq),
        static_cast<int>(Hkv), static_cast<int>(D), static_cast<int>(Dv), shape.scale);
  } else {
    attention_gqa_kernel<<<grid, kWarps * 32, 0, stream()>>>(
        q, static_cast<const float*>(cache.data), cache.width, plan, out, static_cast<int>(Hq),
        static_cast<int>(Hkv), static_cast<int>(D), static_cast<int>(Dv), shape.scale);
  }
  check_launch("attention_gqa");
}

int64_t attention_max_context_bucket(int64_t n) {
  int64_t b = 256;
  while (b < n) b *= 2;
  return b;
}

}  // namespace dsinfer::cuda
