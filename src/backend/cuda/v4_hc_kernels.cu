// DeepSeek-V4's hyper-connection kernels (v4_kernels.h): stream expansion, the mixing logits (one block per
// token and mix: a dot over the token's n * H stream values and their sum of squares), the per-token finish
// (sigmoids, row softmax, Sinkhorn-Knopp on the n x n combination matrix by one warp, and the weighted
// collapse spread over column blocks), the write-back, and the hash layers' expert ids and weights. float32
// throughout, in the order cpu_v4_hc.cpp / cpu_v4_moe.cpp compute (reductions are blockwise, so sums differ
// in rounding; Sinkhorn multiplies by reciprocals where the CPU divides). The mixes and finish launches load
// their weights before the PDL wait.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/v4_hc_device.cuh"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMixThreads = 512;  // hc_mixes: a row of n * H values per block
constexpr int kMixPreload = 8;    // float4s of the weight row a hc_mixes thread loads before the wait
constexpr int64_t kMaxGridY = 65535;

__global__ void hc_expand_kernel(const float* x, float* out, int64_t n, int64_t H, int64_t total) {
  pdl_wait();
  pdl_trigger();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over [T, n, H]
  if (e >= total) return;
  const int64_t t = e / (n * H), i = e % H;
  out[e] = x[t * H + i];
}

// Block (m, t): mixes[t, m] = dot(x[t], fn[m]) / rms(x[t]). Four values a load when F % 4 == 0 (rows 16-byte
// aligned), several loads in flight per thread. Up to kMixPreload float4s of a thread's weights (V4-Flash's
// 4 x 4096 streams: all of them) are loaded before the PDL wait (weights depend on no earlier kernel), then
// all of its stream values at once, so the launch waits on one L2 round trip after the previous kernel.
__global__ void __launch_bounds__(kMixThreads)
    hc_mixes_kernel(const float* x, const float* fn, float* mixes, int64_t F, int64_t M, float norm_eps) {
  const int64_t m = blockIdx.x, t = blockIdx.y;
  const float* w = fn + m * F;  // [F]
  const int64_t F4 = F / 4;
  const bool preload = F % 4 == 0 && F4 <= int64_t{kMixPreload} * kMixThreads;
  float4 wv[kMixPreload];
  if (preload) {
#pragma unroll
    for (int j = 0; j < kMixPreload; ++j) {
      const int64_t i = threadIdx.x + int64_t{j} * kMixThreads;
      if (i < F4) wv[j] = __ldg(reinterpret_cast<const float4*>(w) + i);
    }
  }
  pdl_wait();
  pdl_trigger();
  const float* row = x + t * F;  // [F]
  const float4* row4 = reinterpret_cast<const float4*>(row);
  float dot = 0.0f, ss = 0.0f;
  auto accumulate = [&](const float4& v, const float4& u) {
    dot = fmaf(v.w, u.w, fmaf(v.z, u.z, fmaf(v.y, u.y, fmaf(v.x, u.x, dot))));
    ss = fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, ss))));
  };
  if (preload) {  // the loop below's order, x's values loaded first
    float4 xv[kMixPreload];
#pragma unroll
    for (int j = 0; j < kMixPreload; ++j) {
      const int64_t i = threadIdx.x + int64_t{j} * kMixThreads;
      if (i < F4) xv[j] = row4[i];
    }
#pragma unroll
    for (int j = 0; j < kMixPreload; ++j)
      if (threadIdx.x + int64_t{j} * kMixThreads < F4) accumulate(xv[j], wv[j]);
  } else if (F % 4 == 0) {
    const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < F4; i += kMixThreads) accumulate(row4[i], w4[i]);
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < F; i += kMixThreads) {
      dot = fmaf(row[i], w[i], dot);
      ss = fmaf(row[i], row[i], ss);
    }
  }
  dot = block_sum(dot);
  ss = block_sum(ss);
  if (threadIdx.x == 0) mixes[t * M + m] = dot * rsqrtf(ss / static_cast<float>(F) + norm_eps);
}

// Sinkhorn-Knopp on one n x n matrix (row-major, shared memory) by warp 0, for n above post_comb_warp's: lane
// j scales column (or row) j as hc::sinkhorn_scale does. Columns first, then `iters - 1` row/column rounds.
__device__ void sinkhorn_warp(float* c, int n, int64_t iters, float eps) {
  const int lane = threadIdx.x % 32;
  auto scale_line = [&](bool rows) {
    if (lane < n) {
      const int step = rows ? 1 : n, first = rows ? lane * n : lane;
      float s = 0.0f;
      for (int k = 0; k < n; ++k) s += c[first + k * step];
      const float inv = __fdividef(1.0f, s + eps);
      for (int k = 0; k < n; ++k) c[first + k * step] *= inv;
    }
    __syncwarp();
  };
  scale_line(false);
  for (int64_t i = 0; i + 1 < iters; ++i) {
    scale_line(true);
    scale_line(false);
  }
}

// Block (t, chunk) of a collapse: out[t, i] = sum_j pre[j] x[t, j, i] for its kThreads columns i, with the
// gates pre[j] = sigmoid(mt[j] scale[0] + base[j]) + eps (mt: the token's mixes). The gates' weights are
// loaded before the PDL wait; after it, a thread's n stream values go out with the mixes' loads (one L2 round
// trip, not a gate round trip and then a stream round trip).
__device__ __forceinline__ void collapse_block(const float* x, const float* mt, const float* base,
                                               const float* scale, int n, int64_t H, int64_t t, float hc_eps,
                                               float* out) {
  __shared__ float pre[kMaxHyperStreams];
  const int j = threadIdx.x;
  const float b = j < n ? base[j] : 0.0f, s0 = scale[0];
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const float* xt = x + t * n * H;  // [n, H]
  float xv[kMaxHyperStreams];
#pragma unroll
  for (int k = 0; k < kMaxHyperStreams; ++k) xv[k] = k < n && i < H ? xt[k * H + i] : 0.0f;
  if (j < n) pre[j] = hc::sigmoidf(mt[j] * s0 + b) + hc_eps;
  __syncthreads();
  if (i >= H) return;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxHyperStreams; ++k)
    if (k < n) acc = fmaf(pre[k], xv[k], acc);
  out[t * H + i] = acc;
}

// post [n] and comb [n, n] of one token (mt: its mixes) by warp 0 for N = n <= 5 (hc::post_comb), the
// weights loaded before the PDL wait.
template <int N>
__device__ void post_comb_warp(const float* mt, const float* base, const float* scale, float* post_t,
                               float* comb_t, int64_t iters, float hc_eps) {
  hc::PostCombWeights<N> w;
  w.load(base, scale);
  pdl_wait();
  pdl_trigger();
  hc::post_comb<N>(w, mt, post_t, comb_t, iters, hc_eps);
}

// post_comb_warp for any n <= kMaxHyperStreams: lane j makes stream j's gate and row j's softmax in shared
// memory, then sinkhorn_warp.
__device__ void post_comb_shared(const float* mt, const float* base, const float* scale, float* post_t,
                                 float* comb_t, int n, int64_t iters, float hc_eps) {
  static_assert(kMaxHyperStreams <= 32, "one lane per stream");
  __shared__ float c[kMaxHyperStreams * kMaxHyperStreams];
  pdl_wait();
  pdl_trigger();
  const int j = threadIdx.x % 32;
  if (j < n) {
    post_t[j] = 2.0f * hc::sigmoidf(mt[n + j] * scale[1] + base[n + j]);
    float* row = c + j * n;  // row-wise softmax, then + eps
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
      row[k] = mt[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
      mx = fmaxf(mx, row[k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += (row[k] = expf(row[k] - mx));
    for (int k = 0; k < n; ++k) row[k] = row[k] / sum + hc_eps;
  }
  __syncwarp();
  sinkhorn_warp(c, n, iters, hc_eps);
  for (int e = j; e < n * n; e += 32) comb_t[e] = c[e];
}

// Block (t, chunk < chunks): the token's gates and its kThreads columns of the collapse (collapse_block).
// Block (t, chunks) makes post and comb with warp 0 beside the collapse blocks rather than after a collapse
// chunk, so the launch lasts the longer of the two, not their sum.
__global__ void __launch_bounds__(kThreads)
    hc_pre_finish_kernel(const float* x, const float* mixes, const float* base, const float* scale,
                         float* out, float* post, float* comb, int n, int64_t H, int64_t iters,
                         float hc_eps) {
  const int64_t t = blockIdx.x;
  const float* mt = mixes + t * (2 + n) * n;  // [(2 + n) n]
  if (blockIdx.y + 1 < gridDim.y) {
    collapse_block(x, mt, base, scale, n, H, t, hc_eps, out);
    return;
  }
  if (threadIdx.x >= 32) return;
  float* post_t = post + t * n;      // [n]
  float* comb_t = comb + t * n * n;  // [n, n]
  switch (n) {
    case 1:
      post_comb_warp<1>(mt, base, scale, post_t, comb_t, iters, hc_eps);
      break;
    case 2:
      post_comb_warp<2>(mt, base, scale, post_t, comb_t, iters, hc_eps);
      break;
    case 3:
      post_comb_warp<3>(mt, base, scale, post_t, comb_t, iters, hc_eps);
      break;
    case 4:
      post_comb_warp<4>(mt, base, scale, post_t, comb_t, iters, hc_eps);
      break;
    case 5:
      post_comb_warp<5>(mt, base, scale, post_t, comb_t, iters, hc_eps);
      break;
    default:
      post_comb_shared(mt, base, scale, post_t, comb_t, n, iters, hc_eps);
  }
}

// Block (t, chunk): the token's pre gates, then its kThreads columns of the collapse (collapse_block).
__global__ void __launch_bounds__(kThreads)
    hc_head_finish_kernel(const float* x, const float* mixes, const float* base, const float* scale,
                          float* out, int n, int64_t H, float hc_eps) {
  const int64_t t = blockIdx.x;
  collapse_block(x, mixes + t * n, base, scale, n, H, t, hc_eps, out);
}

__global__ void hc_post_kernel(const float* x, const float* y, const float* post, const float* comb,
                               float* out, int n, int64_t H, int64_t total) {
  pdl_wait();
  pdl_trigger();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over [T, n, H]
  if (e >= total) return;
  const int64_t i = e % H, k = (e / H) % n, t = e / (n * H);
  const float* xt = x + t * n * H;
  const float* c = comb + t * n * n;
  float acc = post[t * n + k] * y[t * H + i];
  for (int j = 0; j < n; ++j) acc = fmaf(c[j * n + k], xt[j * H + i], acc);
  out[e] = acc;
}

__global__ void table_rows_kernel(const int32_t* table, const int32_t* ids, int32_t* out, int64_t k,
                                  int64_t V, int64_t total) {
  pdl_wait();
  pdl_trigger();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over [T, k]
  if (e >= total) return;
  const int64_t id = ids[e / k];
  out[e] = id >= 0 && id < V ? table[id * k + e % k] : 0;
}

// Block (expert group, t): warp w of the block computes logits[t, e] for e = 8 blockIdx.x + w.
__global__ void __launch_bounds__(kThreads)
    router_logits_kernel(const float* x, const uint16_t* router, float* logits, int64_t H, int64_t E) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y, e = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (e >= E) return;
  const float* row = x + t * H;
  const uint16_t* w = router + e * H;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < H; i += 32) acc = fmaf(row[i], bf16_bits_to_float(w[i]), acc);
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) logits[t * E + e] = acc;
}

// Scores of the sigmoid and sqrtsoftplus scorings (softmax: the caller's, over all experts).
__device__ __forceinline__ float hash_score(float v, HashScoring scoring) {
  return scoring == HashScoring::kSigmoid ? 1.0f / (1.0f + expf(-v)) : sqrtf(v > 20.0f ? v : log1pf(expf(v)));
}

// Most chosen experts per token hash_chosen_weights_kernel takes.
constexpr int kMaxChosen = 16;

// One block per token: the scores of all E experts (softmax needs them all), then the chosen ones' weights.
__global__ void __launch_bounds__(kThreads)
    hash_weights_kernel(const float* logits, const int32_t* ids, float* weights, int64_t E, int64_t k,
                        HashScoring scoring, bool normalize, float scaling) {
  pdl_wait();
  pdl_trigger();
  __shared__ float s[kMaxHashExperts];
  const int64_t t = blockIdx.x;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < E; e += kThreads) mx = fmaxf(mx, l[e]);
  if (scoring == HashScoring::kSoftmax) {
    __shared__ float wmax[kThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
    if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = wmax[0];
    for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, wmax[w]);
  }
  float part = 0.0f;
  for (int64_t e = threadIdx.x; e < E; e += kThreads) {
    const float v = l[e];
    float sc;
    if (scoring == HashScoring::kSoftmax) {
      sc = expf(v - mx);
      part += sc;
    } else {
      sc = hash_score(v, scoring);
    }
    s[e] = sc;
  }
  const float total = block_sum(part);  // synchronises: s is complete
  if (threadIdx.x == 0) {
    const int32_t* row = ids + t * k;
    const float div = scoring == HashScoring::kSoftmax ? total : 1.0f;
    float denom = 0.0f;
    for (int64_t j = 0; j < k; ++j) denom += s[row[j]] / div;
    for (int64_t j = 0; j < k; ++j) {
      float w = s[row[j]] / div;
      if (normalize) w /= (denom + 1e-20f);
      weights[t * k + j] = w * scaling;
    }
  }
}

// One block per token, for scorings that need only the chosen experts' logits (sigmoid, sqrtsoftplus), at
// most kMaxChosen of them: the k dots of x[t] with the chosen router rows at once (a thread's columns 8 at a
// time, every load in flight together), then their scores, normalised and scaled as hash_weights_kernel does.
__global__ void __launch_bounds__(kThreads)
    hash_chosen_weights_kernel(const float* x, const uint16_t* router, const int32_t* ids, float* weights,
                               int64_t H, int k, HashScoring scoring, bool normalize, float scaling) {
  __shared__ float part[kThreads / 32][kMaxChosen];
  __shared__ float score[kMaxChosen];
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* row = x + t * H;
  const int32_t* chosen = ids + t * k;
  float acc[kMaxChosen];
  int64_t base[kMaxChosen];
#pragma unroll
  for (int j = 0; j < kMaxChosen; ++j) {
    acc[j] = 0.0f;
    base[j] = j < k ? int64_t{chosen[j]} * H : 0;
  }
  if (H % 8 == 0) {  // rows 16-byte aligned: 8 values a load
#pragma unroll 2
    for (int64_t c = threadIdx.x * 8; c < H; c += kThreads * 8) {
      const float4 x0 = *reinterpret_cast<const float4*>(row + c),
                   x1 = *reinterpret_cast<const float4*>(row + c + 4);
      const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      uint4 wv[kMaxChosen];
#pragma unroll
      for (int j = 0; j < kMaxChosen; ++j)
        if (j < k) wv[j] = *reinterpret_cast<const uint4*>(router + base[j] + c);
#pragma unroll
      for (int j = 0; j < kMaxChosen; ++j) {
        if (j >= k) continue;
        const uint32_t b[4] = {wv[j].x, wv[j].y, wv[j].z, wv[j].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[j] = fmaf(xv[2 * q], __uint_as_float(b[q] << 16), acc[j]);
          acc[j] = fmaf(xv[2 * q + 1], __uint_as_float(b[q] & 0xffff0000u), acc[j]);
        }
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < H; i += kThreads) {
      const float v = row[i];
#pragma unroll
      for (int j = 0; j < kMaxChosen; ++j)
        if (j < k) acc[j] = fmaf(v, bf16_bits_to_float(router[base[j] + i]), acc[j]);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kMaxChosen; ++j) {
    if (j >= k) continue;
    float v = acc[j];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) part[warp][j] = v;
  }
  __syncthreads();
  if (threadIdx.x < k) {
    float logit = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) logit += part[w][threadIdx.x];
    score[threadIdx.x] = hash_score(logit, scoring);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float denom = 0.0f;
    for (int j = 0; j < k; ++j) denom += score[j];
    for (int j = 0; j < k; ++j) {
      float w = score[j];
      if (normalize) w /= (denom + 1e-20f);
      weights[t * k + j] = w * scaling;
    }
  }
}

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>((total + kThreads - 1) / kThreads);
}

}  // namespace

void launch_hc_expand(const float* x, float* out, int64_t T, int64_t n, int64_t H) {
  const int64_t total = T * n * H;
  if (total == 0) return;
  launch_pdl(hc_expand_kernel, blocks_for(total), kThreads, 0, x, out, n, H, total);
  check_launch("hc_expand");
}

void launch_hc_mixes(const float* x, const float* fn, float* mixes, int64_t T, int64_t F, int64_t M,
                     float norm_eps) {
  if (T == 0 || M == 0) return;
  for (int64_t t0 = 0; t0 < T; t0 += kMaxGridY) {  // grid.y holds at most 65535 tokens
    const int64_t count = std::min(kMaxGridY, T - t0);
    launch_pdl(hc_mixes_kernel, dim3(static_cast<unsigned>(M), static_cast<unsigned>(count)), kMixThreads, 0,
               x + t0 * F, fn, mixes + t0 * M, F, M, norm_eps);
    check_launch("hc_mixes");
  }
}

void launch_hc_pre_finish(const float* x, const float* mixes, const float* base, const float* scale,
                          float* out, float* post, float* comb, int64_t T, int64_t n, int64_t H,
                          int64_t iters, float hc_eps) {
  if (T == 0) return;
  DSI_CHECK(n >= 1 && n <= kMaxHyperStreams, "hc_pre: ", n, " streams (at most ", kMaxHyperStreams, ")");
  const int64_t chunks = (H + kThreads - 1) / kThreads;
  DSI_CHECK(chunks < kMaxGridY && T <= int64_t{2147483647}, "hc_pre: ", T, " tokens of ", H, " values");
  launch_pdl(hc_pre_finish_kernel, dim3(static_cast<unsigned>(T), static_cast<unsigned>(chunks + 1)),
             kThreads, 0, x, mixes, base, scale, out, post, comb, static_cast<int>(n), H, iters, hc_eps);
  check_launch("hc_pre_finish");
}

void launch_hc_head_finish(const float* x, const float* mixes, const float* base, const float* scale,
                           float* out, int64_t T, int64_t n, int64_t H, float hc_eps) {
  if (T == 0) return;
  DSI_CHECK(n >= 1 && n <= kMaxHyperStreams, "hc_head: ", n, " streams (at most ", kMaxHyperStreams, ")");
  const int64_t chunks = (H + kThreads - 1) / kThreads;
  DSI_CHECK(chunks <= kMaxGridY && T <= int64_t{2147483647}, "hc_head: ", T, " tokens of ", H, " values");
  launch_pdl(hc_head_finish_kernel, dim3(static_cast<unsigned>(T), static_cast<unsigned>(chunks)), kThreads,
             0, x, mixes, base, scale, out, static_cast<int>(n), H, hc_eps);
  check_launch("hc_head_finish");
}

void launch_hc_post(const float* x, const float* y, const float* post, const float* comb, float* out,
                    int64_t T, int64_t n, int64_t H) {
  const int64_t total = T * n * H;
  if (total == 0) return;
  launch_pdl(hc_post_kernel, blocks_for(total), kThreads, 0, x, y, post, comb, out, static_cast<int>(n), H,
             total);
  check_launch("hc_post");
}

void launch_table_rows(const int32_t* table, const int32_t* ids, int32_t* out, int64_t T, int64_t k,
                       int64_t V) {
  const int64_t total = T * k;
  if (total == 0) return;
  launch_pdl(table_rows_kernel, blocks_for(total), kThreads, 0, table, ids, out, k, V, total);
  check_launch("table_rows");
}

void launch_moe_weights_for(const float* x, const uint16_t* router, const int32_t* ids, float* logits,
                            float* weights, int64_t T, int64_t H, int64_t E, int64_t k, HashScoring scoring,
                            bool normalize, float scaling) {
  if (T == 0 || k == 0) return;
  DSI_CHECK(E >= 1 && E <= kMaxHashExperts, "moe_weights_for: ", E, " experts (at most ", kMaxHashExperts,
            ")");
  if (scoring != HashScoring::kSoftmax && k <= kMaxChosen && T <= int64_t{2147483647}) {
    // Only the chosen experts' logits are needed (no softmax over all of them).
    launch_pdl(hash_chosen_weights_kernel, static_cast<unsigned>(T), kThreads, 0, x, router, ids, weights, H,
               static_cast<int>(k), scoring, normalize, scaling);
    check_launch("moe_weights_for");
    return;
  }
  const int64_t per_block = kThreads / 32;
  for (int64_t t0 = 0; t0 < T; t0 += kMaxGridY) {
    const int64_t count = std::min(kMaxGridY, T - t0);
    launch_pdl(router_logits_kernel,
               dim3(static_cast<unsigned>((E + per_block - 1) / per_block), static_cast<unsigned>(count)),
               kThreads, 0, x + t0 * H, router, logits + t0 * E, H, E);
    check_launch("moe_weights_for logits");
  }
  launch_pdl(hash_weights_kernel, static_cast<unsigned>(T), kThreads, 0, logits, ids, weights, E, k, scoring,
             normalize, scaling);
  check_launch("moe_weights_for");
}

}  // namespace dsinfer::cuda
