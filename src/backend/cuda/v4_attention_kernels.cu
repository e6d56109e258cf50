// DeepSeek-V4's attention-side kernels (v4_kernels.h) over the paged cache (float32 or bf16 rows): the
// compressor's window pooling (one thread per output value, an online softmax over the window's tokens), the
// indexer's visible compressed rows, and the shared-KV attention with sinks (one block per (head, token):
// chunks of 32 keys, the dots by warps, an online softmax, the values accumulated by every thread over its
// share of the head dim). Simple CUDA-core kernels: correctness first (each head re-reads its token's keys).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using attn::slot_of;
using attn::to_float;

constexpr int kPoolThreads = 128;
constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kChunk = 32;                                   // keys per round
constexpr int kAccPerThread = kMaxV4HeadDim / kAttnThreads;  // head-dim values a thread accumulates
constexpr int64_t kMaxGridY = 65535;

template <typename E>
__global__ void __launch_bounds__(kPoolThreads) compress_rows_kernel(CompressRowsArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x, d = static_cast<int64_t>(blockIdx.y) * kPoolThreads + threadIdx.x;
  if (d >= a.D) return;
  const int64_t c = a.overlap ? 2 : 1, D = a.D, W = a.in.width;
  const E* rows = static_cast<const E*>(a.in.data);
  const int32_t s = a.seqs[i];
  const int64_t j = a.rows[i];
  float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
  // Entry k of a window at `pos`, half `half` of its [kv | gate] row parts.
  auto visit = [&](int64_t pos, int64_t k, int64_t half) {
    const E* row = rows + slot_of(a.plan, s, pos) * W;
    const float kv = to_float(row[half * D + d]);
    const float logit = to_float(row[c * D + half * D + d]) + a.ape[k * c * D + half * D + d];
    if (logit > mx) {
      const float corr = expf(mx - logit);  // 0 on the first entry
      sum *= corr;
      acc *= corr;
      mx = logit;
    }
    const float p = expf(logit - mx);
    sum += p;
    acc = fmaf(p, kv, acc);
  };
  if (a.overlap && j > 0) {
    for (int64_t k = 0; k < a.ratio; ++k) visit((j - 1) * a.ratio + k, k, 0);
  }
  for (int64_t k = 0; k < a.ratio; ++k) visit(j * a.ratio + k, k, c - 1);
  a.out[i * D + d] = acc / sum;
}

__global__ void compressed_visible_kernel(const int32_t* positions, int32_t* visible, int64_t T,
                                          int64_t ratio) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < T) visible[t] = static_cast<int32_t>((static_cast<int64_t>(positions[t]) + 1) / ratio - 1);
}

template <typename E>
__global__ void __launch_bounds__(kAttnThreads) attention_v4_kernel(AttentionV4Args a, int64_t t0) {
  pdl_wait();
  pdl_trigger();
  __shared__ float q_s[kMaxV4HeadDim];
  __shared__ float logit_s[kChunk];
  __shared__ const E* key_s[kChunk];
  const int64_t h = blockIdx.x, t = t0 + blockIdx.y;
  const int D = static_cast<int>(a.D), tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t seq = a.plan.token_seq[t];
  const int64_t pos = a.plan.positions[t];
  for (int d = tid; d < D; d += kAttnThreads) q_s[d] = a.q[(t * a.H + h) * D + d];
  // Keys: the raw window (oldest first), then the compressed rows (all visible ones, or the selection).
  const int64_t nw = a.window < pos + 1 ? a.window : pos + 1;
  const bool has_comp = a.comp.data != nullptr;
  const int64_t visible = has_comp ? (pos + 1) / a.ratio : 0;
  const int64_t nc = has_comp ? (a.selected ? a.K : visible) : 0;
  const int64_t n = nw + nc;
  const E* win = static_cast<const E*>(a.window_rows.data);
  const E* comp = static_cast<const E*>(a.comp.data);
  float m = a.sinks[h], s = 1.0f;  // the sink: exp(sink - m) in the denominator, no value
  float acc[kAccPerThread];
#pragma unroll
  for (int r = 0; r < kAccPerThread; ++r) acc[r] = 0.0f;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    __syncthreads();  // the previous round's keys and logits are consumed (and q_s written)
    if (tid < kChunk) {
      const int64_t e = c0 + tid;
      const E* p = nullptr;
      if (e < nw) {
        p = win + slot_of(a.plan, seq, pos - nw + 1 + e) * a.window_rows.width;
      } else if (e < n) {
        int64_t j = e - nw;
        if (a.selected) j = a.selected[t * a.K + j];
        if (j >= 0 && j < visible) p = comp + slot_of(a.plan, seq, j) * a.comp.width;
      }
      key_s[tid] = p;
    }
    __syncthreads();
    for (int k = warp; k < kChunk; k += kAttnWarps) {
      const E* p = key_s[k];
      float dot = 0.0f;
      if (p) {
        for (int d = lane; d < D; d += 32) dot = fmaf(q_s[d], to_float(p[d]), dot);
        for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      }
      if (lane == 0) logit_s[k] = p ? dot * a.scale : -INFINITY;
    }
    __syncthreads();
    float cm = m;
    for (int k = 0; k < kChunk; ++k) cm = fmaxf(cm, logit_s[k]);
    const float corr = expf(m - cm);
    s *= corr;
#pragma unroll
    for (int r = 0; r < kAccPerThread; ++r) acc[r] *= corr;
    m = cm;
    for (int k = 0; k < kChunk; ++k) {
      const E* p = key_s[k];
      if (!p) continue;
      const float w = expf(logit_s[k] - m);
      s += w;
#pragma unroll
      for (int r = 0; r < kAccPerThread; ++r) {
        const int d = tid + r * kAttnThreads;
        if (d < D) acc[r] = fmaf(w, to_float(p[d]), acc[r]);
      }
    }
  }
  float* o = a.out + (t * a.H + h) * D;
  const float inv = 1.0f / s;
#pragma unroll
  for (int r = 0; r < kAccPerThread; ++r) {
    const int d = tid + r * kAttnThreads;
    if (d < D) o[d] = acc[r] * inv;
  }
}

}  // namespace

void launch_compress_rows(const CompressRowsArgs& a) {
  if (a.R == 0 || a.D == 0) return;
  const dim3 grid(static_cast<unsigned>(a.R), static_cast<unsigned>((a.D + kPoolThreads - 1) / kPoolThreads));
  DSI_CHECK(grid.y <= kMaxGridY && a.R <= int64_t{2147483647}, "compress_rows: ", a.R, " rows of ", a.D);
  if (a.in.bf16) {
    launch_pdl(compress_rows_kernel<__nv_bfloat16>, grid, kPoolThreads, 0, a);
  } else {
    launch_pdl(compress_rows_kernel<float>, grid, kPoolThreads, 0, a);
  }
  check_launch("compress_rows");
}

void launch_compressed_visible(const int32_t* positions, int32_t* visible, int64_t T, int64_t ratio) {
  if (T == 0) return;
  DSI_CHECK(ratio > 0, "compressed_visible: ratio must be positive");
  const int threads = 256;
  launch_pdl(compressed_visible_kernel, static_cast<unsigned>((T + threads - 1) / threads), threads, 0,
             positions, visible, T, ratio);
  check_launch("compressed_visible");
}

void launch_attention_v4(const AttentionV4Args& a) {
  if (a.T == 0 || a.H == 0) return;
  DSI_CHECK(a.D > 0 && a.D <= kMaxV4HeadDim, "attention_v4: head dim ", a.D, " (at most ", kMaxV4HeadDim,
            ")");
  DSI_CHECK(a.H <= int64_t{2147483647}, "attention_v4: ", a.H, " heads");
  DSI_CHECK(!a.comp.data || a.comp.bf16 == a.window_rows.bf16,
            "attention_v4: the window and compressed rows must share a cache dtype");
  DSI_CHECK(a.ratio > 0, "attention_v4: ratio must be positive");
  for (int64_t t0 = 0; t0 < a.T; t0 += kMaxGridY) {
    const dim3 grid(static_cast<unsigned>(a.H), static_cast<unsigned>(std::min(kMaxGridY, a.T - t0)));
    if (a.window_rows.bf16) {
      launch_pdl(attention_v4_kernel<__nv_bfloat16>, grid, kAttnThreads, 0, a, t0);
    } else {
      launch_pdl(attention_v4_kernel<float>, grid, kAttnThreads, 0, a, t0);
    }
    check_launch("attention_v4");
  }
}

}  // namespace dsinfer::cuda
