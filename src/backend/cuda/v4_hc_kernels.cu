// DeepSeek-V4's hyper-connection kernels (v4_kernels.h): stream expansion, the mixing logits (one block per
// token and mix: a dot over the token's n * H stream values and their sum of squares), the per-token finish
// (sigmoids, row softmax, Sinkhorn-Knopp on the n x n combination matrix by one warp, and the weighted
// collapse spread over column blocks), the write-back, and the hash layers' expert ids and weights. float32
// throughout, in the order cpu_v4_hc.cpp / cpu_v4_moe.cpp compute (reductions are blockwise, so sums differ
// in rounding).
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMixThreads = 512;  // hc_mixes: a row of n * H values per block
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float sigmoidf(float v) {
  return 1.0f / (1.0f + expf(-v));
}

__global__ void hc_expand_kernel(const float* x, float* out, int64_t n, int64_t H, int64_t total) {
  pdl_wait();
  pdl_trigger();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over [T, n, H]
  if (e >= total) return;
  const int64_t t = e / (n * H), i = e % H;
  out[e] = x[t * H + i];
}

// hc_post's inputs, when the mixes kernel forms the streams itself (hc_post_mixes): x [T, n, H] the old
// streams, y [T, H], post [T, n], comb [T, n, n]; the new streams go to out [T, n, H] (block m = 0 writes
// them).
struct HcPostInputs {
  const float* x = nullptr;
  const float* y = nullptr;
  const float* post = nullptr;
  const float* comb = nullptr;
  float* out = nullptr;
  int n = 0;
  int64_t H = 0;
  bool vec4 = false;  // H % 4 == 0 and x, y, out 16-byte aligned: four values a load and a store
};

// New stream value e (= k H + i) of a token: hc_post_kernel's expression (post, comb of the token in shared
// memory; xt [n, H] and yt [H] the token's).
__device__ __forceinline__ float post_value(const float* xt, const float* yt, const float* s_post,
                                            const float* s_comb, int n, int64_t H, int64_t e) {
  const int64_t k = e / H, i = e % H;
  float acc = s_post[k] * yt[i];
  for (int j = 0; j < n; ++j) acc = fmaf(s_comb[j * n + k], xt[j * H + i], acc);
  return acc;
}

// The same for four consecutive values e .. e + 3 of one stream (H % 4 == 0, e % 4 == 0; n * H < 2^31).
// kN > 0: n == kN, every stream's load issued before the sums (a loop over a run-time n is a chain of
// dependent L2 round trips: the fused launch took 14 us against hc_post's 3.4 + hc_mixes' 3.6 on an H100).
template <int kN>
__device__ __forceinline__ float4 post_value4(const float* xt, const float* yt, const float* s_post,
                                              const float* s_comb, int n_rt, int H, int e) {
  const int n = kN > 0 ? kN : n_rt;
  const int k = e / H, i = e - k * H;
  const float p = s_post[k];
  const float4 yv = *reinterpret_cast<const float4*>(yt + i);
  float4 acc = make_float4(p * yv.x, p * yv.y, p * yv.z, p * yv.w);
  if constexpr (kN > 0) {
    float4 xv[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) xv[j] = *reinterpret_cast<const float4*>(xt + j * H + i);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float c = s_comb[j * kN + k];
      acc = make_float4(fmaf(c, xv[j].x, acc.x), fmaf(c, xv[j].y, acc.y), fmaf(c, xv[j].z, acc.z),
                        fmaf(c, xv[j].w, acc.w));
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const float c = s_comb[j * n + k];
      const float4 xv = *reinterpret_cast<const float4*>(xt + j * H + i);
      acc =
          make_float4(fmaf(c, xv.x, acc.x), fmaf(c, xv.y, acc.y), fmaf(c, xv.z, acc.z), fmaf(c, xv.w, acc.w));
    }
  }
  return acc;
}

// Block (m, t): mixes[t, m] = dot(x[t], fn[m]) / rms(x[t]). Four values a load when F % 4 == 0 (rows 16-byte
// aligned), several loads in flight per thread. kPost: the token's streams x[t] are hc_post's new streams,
// formed here from pi (the same values hc_post_kernel computes; block m = 0 also stores them), so the launch
// replaces hc_post + hc_mixes with the same bits.
template <bool kPost, int kN = 0>
__global__ void __launch_bounds__(kMixThreads)
    hc_mixes_kernel(const float* x, const float* fn, float* mixes, int64_t F, int64_t M, float norm_eps,
                    HcPostInputs pi) {
  __shared__ float s_post[kPost ? kMaxHyperStreams : 1];
  __shared__ float s_comb[kPost ? kMaxHyperStreams * kMaxHyperStreams : 1];
  pdl_wait();
  pdl_trigger();
  const int64_t m = blockIdx.x, t = blockIdx.y;
  const float* row = kPost ? nullptr : x + t * F;  // [F]
  const float* w = fn + m * F;                     // [F]
  const int n = pi.n;
  const int64_t H = pi.H;
  const float* xt = kPost ? pi.x + t * F : nullptr;  // [n, H]
  const float* yt = kPost ? pi.y + t * H : nullptr;  // [H]
  float* out = kPost && m == 0 ? pi.out + t * F : nullptr;
  if constexpr (kPost) {
    if (threadIdx.x < n) s_post[threadIdx.x] = pi.post[t * n + threadIdx.x];
    if (threadIdx.x < n * n) s_comb[threadIdx.x] = pi.comb[t * n * n + threadIdx.x];
    __syncthreads();
  }
  float dot = 0.0f, ss = 0.0f;
  if (F % 4 == 0) {  // (kPost: hc_mixes' order over the values however they are formed)
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < F / 4; i += kMixThreads) {
      float4 v;
      if constexpr (kPost) {
        if (pi.vec4) {
          v = post_value4<kN>(xt, yt, s_post, s_comb, n, static_cast<int>(H), static_cast<int>(4 * i));
          if (out) reinterpret_cast<float4*>(out)[i] = v;
        } else {
          v = make_float4(post_value(xt, yt, s_post, s_comb, n, H, 4 * i),
                          post_value(xt, yt, s_post, s_comb, n, H, 4 * i + 1),
                          post_value(xt, yt, s_post, s_comb, n, H, 4 * i + 2),
                          post_value(xt, yt, s_post, s_comb, n, H, 4 * i + 3));
          if (out) {
            out[4 * i] = v.x;
            out[4 * i + 1] = v.y;
            out[4 * i + 2] = v.z;
            out[4 * i + 3] = v.w;
          }
        }
      } else {
        v = row4[i];
      }
      const float4 u = w4[i];
      dot = fmaf(v.w, u.w, fmaf(v.z, u.z, fmaf(v.y, u.y, fmaf(v.x, u.x, dot))));
      ss = fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, ss))));
    }
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < F; i += kMixThreads) {
      float v;
      if constexpr (kPost) {
        v = post_value(xt, yt, s_post, s_comb, n, H, i);
        if (out) out[i] = v;
      } else {
        v = row[i];
      }
      dot = fmaf(v, w[i], dot);
      ss = fmaf(v, v, ss);
    }
  }
  dot = block_sum(dot);
  ss = block_sum(ss);
  if (threadIdx.x == 0) mixes[t * M + m] = dot * rsqrtf(ss / static_cast<float>(F) + norm_eps);
}

// Sinkhorn-Knopp on one n x n matrix (row-major, shared memory) by warp 0: columns first, then `iters - 1`
// row/column rounds, lane j summing and dividing column (or row) j in the order one thread would.
__device__ void sinkhorn_warp(float* c, int n, int64_t iters, float eps) {
  const int lane = threadIdx.x % 32;
  auto norm_cols = [&]() {
    if (lane < n) {
      float s = 0.0f;
      for (int r = 0; r < n; ++r) s += c[r * n + lane];
      for (int r = 0; r < n; ++r) c[r * n + lane] /= (s + eps);
    }
    __syncwarp();
  };
  auto norm_rows = [&]() {
    if (lane < n) {
      float s = 0.0f;
      for (int col = 0; col < n; ++col) s += c[lane * n + col];
      for (int col = 0; col < n; ++col) c[lane * n + col] /= (s + eps);
    }
    __syncwarp();
  };
  norm_cols();
  for (int64_t i = 0; i + 1 < iters; ++i) {
    norm_rows();
    norm_cols();
  }
}

// Block (t, chunk) of a collapse: out[t, i] = sum_j pre[j] x[t, j, i] for its kThreads columns i (pre in
// shared memory).
__device__ __forceinline__ void collapse_chunk(const float* x, const float* pre, int n, int64_t H, int64_t t,
                                               float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= H) return;
  const float* xt = x + t * n * H;
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc = fmaf(pre[j], xt[j * H + i], acc);
  out[t * H + i] = acc;
}

// Sinkhorn-Knopp as sinkhorn_warp computes it, for N * N <= 32: lane r * N + col holds c[r][col] in a
// register and gathers its column's (row's) values by shuffles, all in flight at once, summing them in the
// same order.
template <int N>
__device__ float sinkhorn_lanes(float v, int64_t iters, float eps) {
  static_assert(N * N <= 32, "one lane per entry");
  const int lane = threadIdx.x % 32, row = lane / N, col = lane % N;
  auto norm_cols = [&]() {
    float g[N];
#pragma unroll
    for (int r = 0; r < N; ++r) g[r] = __shfl_sync(0xffffffffu, v, r * N + col);
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < N; ++r) s += g[r];
    v /= (s + eps);
  };
  auto norm_rows = [&]() {
    float g[N];
#pragma unroll
    for (int k = 0; k < N; ++k) g[k] = __shfl_sync(0xffffffffu, v, row * N + k);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) s += g[k];
    v /= (s + eps);
  };
  norm_cols();
  for (int64_t i = 0; i + 1 < iters; ++i) {
    norm_rows();
    norm_cols();
  }
  return v;
}

// The matrix c (n x n, shared) after Sinkhorn, written to comb [n * n] by warp 0: in registers up to 5
// streams.
__device__ void sinkhorn_to(float* c, float* comb, int n, int64_t iters, float eps) {
  const int lane = threadIdx.x % 32;
  const float v = lane < n * n ? c[lane] : 0.0f;
  float r = 0.0f;
  switch (n) {
    case 1:
      r = sinkhorn_lanes<1>(v, iters, eps);
      break;
    case 2:
      r = sinkhorn_lanes<2>(v, iters, eps);
      break;
    case 3:
      r = sinkhorn_lanes<3>(v, iters, eps);
      break;
    case 4:
      r = sinkhorn_lanes<4>(v, iters, eps);
      break;
    case 5:
      r = sinkhorn_lanes<5>(v, iters, eps);
      break;
    default:
      sinkhorn_warp(c, n, iters, eps);
      for (int e = lane; e < n * n; e += 32) comb[e] = c[e];
      return;
  }
  if (lane < n * n) comb[lane] = r;
}

// Block (t, chunk < chunks): the token's pre gates (every block makes the same ones), then its kThreads
// columns of the collapse. Block (t, chunks) makes post and comb with warp 0 (lane j: stream j's gate and row
// j's softmax, then Sinkhorn) beside the collapse blocks rather than after a collapse chunk, so the kernel
// should last the longer of the two, not their sum (not timed alone: 9.4 us a launch in an H100 trace of the
// V4-Flash 4-layer slice with it, docs/benchmarks.md, fifty-second session). kMaxHyperStreams <= 32 lanes.
__global__ void __launch_bounds__(kThreads)
    hc_pre_finish_kernel(const float* x, const float* mixes, const float* base, const float* scale,
                         float* out, float* post, float* comb, int n, int64_t H, int64_t iters,
                         float hc_eps) {
  pdl_wait();
  pdl_trigger();
  static_assert(kMaxHyperStreams <= 32, "one lane per stream");
  __shared__ float pre[kMaxHyperStreams];
  __shared__ float c[kMaxHyperStreams * kMaxHyperStreams];
  const int64_t t = blockIdx.x;
  const float* m = mixes + t * (2 + n) * n;  // [(2 + n) n]
  const int j = threadIdx.x;
  if (blockIdx.y + 1 < gridDim.y) {
    if (j < n) pre[j] = sigmoidf(m[j] * scale[0] + base[j]) + hc_eps;
    __syncthreads();
    collapse_chunk(x, pre, n, H, t, out);
    return;
  }
  if (j >= 32) return;
  if (j < n) {
    post[t * n + j] = 2.0f * sigmoidf(m[n + j] * scale[1] + base[n + j]);
    float* row = c + j * n;  // row-wise softmax, then + eps
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
      row[k] = m[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
      mx = fmaxf(mx, row[k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += (row[k] = expf(row[k] - mx));
    for (int k = 0; k < n; ++k) row[k] = row[k] / sum + hc_eps;
  }
  __syncwarp();
  sinkhorn_to(c, comb + t * n * n, n, iters, hc_eps);
}

// Block (t, chunk): the token's pre gates, then its kThreads columns of the collapse (as hc_pre_finish).
__global__ void __launch_bounds__(kThreads)
    hc_head_finish_kernel(const float* x, const float* mixes, const float* base, const float* scale,
                          float* out, int n, int64_t H, float hc_eps) {
  pdl_wait();
  pdl_trigger();
  __shared__ float pre[kMaxHyperStreams];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < n)
    pre[threadIdx.x] = sigmoidf(mixes[t * n + threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
  __syncthreads();
  collapse_chunk(x, pre, n, H, t, out);
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
    launch_pdl(hc_mixes_kernel<false>, dim3(static_cast<unsigned>(M), static_cast<unsigned>(count)),
               kMixThreads, 0, x + t0 * F, fn, mixes + t0 * M, F, M, norm_eps, HcPostInputs{});
    check_launch("hc_mixes");
  }
}

void launch_hc_post_mixes(const float* x, const float* y, const float* post, const float* comb, float* out,
                          const float* fn, float* mixes, int64_t T, int64_t n, int64_t H, int64_t M,
                          float norm_eps) {
  DSI_CHECK(n >= 1 && n <= kMaxHyperStreams, "hc_post_mixes: ", n, " streams (at most ", kMaxHyperStreams,
            ")");
  if (T == 0) return;
  DSI_CHECK(M >= 1, "hc_post_mixes: no mixes");
  const int64_t F = n * H;
  for (int64_t t0 = 0; t0 < T; t0 += kMaxGridY) {
    const int64_t count = std::min(kMaxGridY, T - t0);
    HcPostInputs pi{x + t0 * F,          y + t0 * H, post + t0 * n, comb + t0 * n * n, out + t0 * F,
                    static_cast<int>(n), H};
    pi.vec4 = H % 4 == 0 && aligned16(pi.x) && aligned16(pi.y) && aligned16(pi.out);
    DSI_CHECK(F < (int64_t{1} << 31), "hc_post_mixes: ", n, " streams of ", H, " values");
    const dim3 grid(static_cast<unsigned>(M), static_cast<unsigned>(count));
    if (n == 4) {  // DeepSeek-V4's hc_mult
      launch_pdl(hc_mixes_kernel<true, 4>, grid, kMixThreads, 0, nullptr, fn, mixes + t0 * M, F, M, norm_eps,
                 pi);
    } else {
      launch_pdl(hc_mixes_kernel<true>, grid, kMixThreads, 0, nullptr, fn, mixes + t0 * M, F, M, norm_eps,
                 pi);
    }
    check_launch("hc_post_mixes");
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
