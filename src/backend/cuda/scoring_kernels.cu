// The scoring kernel (scoring_kernels.h): a known token's log-softmax and the top alternatives of a row of
// logits, one 256-thread block per row. Keys order the alternatives as the host does: (order-preserving bits
// of the value) << 32 | (V - 1 - id), larger first, so equal values put the lower id first.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/float_order.cuh"
#include "backend/cuda/publish_result.cuh"
#include "backend/cuda/scoring_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = 2048;   // candidates sorted in shared memory
constexpr int kLadder = 12;  // cuts max - {0, 2^-4, 2^-3, ..., 2^6}

__device__ __forceinline__ float ladder_cut(int j) {
  return j == 0 ? 0.0f : exp2f(static_cast<float>(j - 5));
}

__device__ __forceinline__ uint64_t key_of(float v, int32_t i, int32_t V) {
  return (static_cast<uint64_t>(ordered_bits(v)) << 32) | static_cast<uint32_t>(V - 1 - i);
}

struct ScoreShared {
  uint64_t cand[kCap];
  float red_m[kWarps];
  float red_s[kWarps];
  int red_bad[kWarps];
  uint32_t red_cnt[kWarps][kLadder];
  uint64_t red_key[kWarps];
  uint32_t counts[kLadder];
  int ncand;
  float max;
  double log_sum;
  int bad;
};

// Adds (m2, s2) to the running (m, s): s is the sum of exp(x - m) over what it has seen.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m2 > m) {
    s = s * expf(m - m2) + s2;  // m == -inf: s is 0 and expf(-inf) is 0
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

// Calls f(value, index) for every element of row x [V], each thread a strided share (float4 loads when the
// rows are 16-byte aligned).
template <class F>
__device__ __forceinline__ void for_each_value(const float* x, int32_t V, F&& f) {
  if ((V & 3) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int32_t i = threadIdx.x; i < V / 4; i += kThreads) {
      const float4 q = x4[i];
      f(q.x, 4 * i);
      f(q.y, 4 * i + 1);
      f(q.z, 4 * i + 2);
      f(q.w, 4 * i + 3);
    }
  } else {
    for (int32_t i = threadIdx.x; i < V; i += kThreads) f(x[i], i);
  }
}

__device__ uint64_t block_max_key(uint64_t v, ScoreShared& sm) {
  for (int o = 16; o > 0; o /= 2) {
    const uint64_t w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  if (threadIdx.x % 32 == 0) sm.red_key[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t r = sm.red_key[0];
  for (int w = 1; w < kWarps; ++w) r = sm.red_key[w] > r ? sm.red_key[w] : r;
  __syncthreads();
  return r;
}

// Sorts cand[0, n) (padded with zeros, below every key) in descending order: a bitonic sort over the next
// power of two.
__device__ void sort_descending(ScoreShared& sm, int n) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += kThreads) sm.cand[i] = 0;
  for (int span = 2; span <= size; span <<= 1) {
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const uint64_t a = sm.cand[i], b = sm.cand[j];
        const bool descending = (i & span) == 0;
        if (descending ? a < b : a > b) {
          sm.cand[i] = b;
          sm.cand[j] = a;
        }
      }
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    score_rows_kernel(const float* logits, int32_t V, const int32_t* rows, const SampleRowParams* params,
                      SampleRowResult* results, SampleRowResult* host_results) {
  __shared__ ScoreShared sm;
  const int64_t r = rows[blockIdx.x];
  const SampleRowParams p = params[r];
  const float* x = logits + r * V;
  SampleRowResult& out = results[r];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Pass 1: max, sum of exp(x - max), NaN / +inf.
  float m = -INFINITY, s = 0.0f;
  int bad = 0;
  for_each_value(x, V, [&](float v, int32_t) {
    if (!(v < INFINITY)) {
      bad = 1;  // NaN or +inf
    } else if (v != -INFINITY) {
      merge_max_sum(m, s, v, 1.0f);
    }
  });
  for (int o = 16; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    merge_max_sum(m, s, m2, s2);
  }
  if (lane == 0) {
    sm.red_m[warp] = m;
    sm.red_s[warp] = s;
    sm.red_bad[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float mx = -INFINITY;
    int any_bad = 0;
    for (int w = 0; w < kWarps; ++w) {
      mx = fmaxf(mx, sm.red_m[w]);
      any_bad |= sm.red_bad[w];
    }
    double sum = 0.0;
    for (int w = 0; w < kWarps; ++w)
      if (sm.red_m[w] != -INFINITY)
        sum += static_cast<double>(sm.red_s[w]) * exp(static_cast<double>(sm.red_m[w]) - mx);
    sm.max = mx;
    sm.log_sum = log(sum);
    sm.bad = any_bad;
    sm.ncand = 0;
  }
  __syncthreads();
  const float mx = sm.max;
  const double log_sum = sm.log_sum;
  const auto logprob_of = [&](float v) { return static_cast<float>(static_cast<double>(v) - mx - log_sum); };
  int num_top = 0;
  if (sm.bad == 0 && mx != -INFINITY) {
    const int k = min(p.logprobs, min(V, kSampleMaxTopLogprobs));
    if (k > 0) {
      // Pass 2: how many values lie within each cut of the max.
      float cut[kLadder];
      uint32_t cnt[kLadder];
#pragma unroll
      for (int j = 0; j < kLadder; ++j) {
        cut[j] = mx - ladder_cut(j);
        cnt[j] = 0;
      }
      for_each_value(x, V, [&](float v, int32_t) {
#pragma unroll
        for (int j = 0; j < kLadder; ++j) cnt[j] += v >= cut[j] ? 1u : 0u;
      });
#pragma unroll
      for (int j = 0; j < kLadder; ++j) {
        uint32_t c = cnt[j];
        for (int o = 16; o > 0; o /= 2) c += __shfl_xor_sync(0xffffffffu, c, o);
        if (lane == 0) sm.red_cnt[warp][j] = c;
      }
      __syncthreads();
      if (threadIdx.x < kLadder) {
        uint32_t c = 0;
        for (int w = 0; w < kWarps; ++w) c += sm.red_cnt[w][threadIdx.x];
        sm.counts[threadIdx.x] = c;
      }
      __syncthreads();
      // The tightest cut with k values at or above it (else every value, -inf ones included).
      float t = -INFINITY;
      uint32_t n = static_cast<uint32_t>(V);
      for (int j = 0; j < kLadder; ++j) {
        if (sm.counts[j] >= static_cast<uint32_t>(k)) {
          t = cut[j];
          n = sm.counts[j];
          break;
        }
      }
      if (n <= static_cast<uint32_t>(kCap)) {
        // Pass 3: the candidates into shared memory, sorted there.
        for_each_value(x, V, [&](float v, int32_t i) {
          if (v >= t) sm.cand[atomicAdd(&sm.ncand, 1)] = key_of(v, i, V);
        });
        __syncthreads();
        sort_descending(sm, static_cast<int>(n));
      } else {
        // Near-flat rows: one pass per alternative, each the largest key below the last.
        uint64_t below = ~uint64_t{0};
        for (int j = 0; j < k; ++j) {
          uint64_t best = 0;
          for_each_value(x, V, [&](float v, int32_t i) {
            const uint64_t key = key_of(v, i, V);
            if (key < below && key > best) best = key;
          });
          best = block_max_key(best, sm);
          if (threadIdx.x == 0) sm.cand[j] = best;
          below = best;
        }
        __syncthreads();
      }
      num_top = k;
      if (threadIdx.x < k) {
        const uint64_t key = sm.cand[threadIdx.x];
        write_result_top(out, host_results, r, threadIdx.x, V - 1 - static_cast<int32_t>(key & 0xffffffffu),
                         logprob_of(from_ordered_bits(static_cast<uint32_t>(key >> 32))));
      }
    }
  }
  if (threadIdx.x == 0) {
    const bool ok = sm.bad == 0 && mx != -INFINITY;
    write_result_header(out, host_results, r, ok ? p.forced_token : -1,
                        sm.bad ? kSampleBadLogit
                        : ok   ? kSampleOk
                               : kSampleAllMasked,
                        ok ? logprob_of(x[p.forced_token]) : 0.0f, ok ? num_top : 0);
  }
}

}  // namespace

void launch_score_rows(const float* logits, int64_t V, const int32_t* rows, int64_t n,
                       const SampleRowParams* params, SampleRowResult* results,
                       SampleRowResult* host_results) {
  if (n == 0) return;
  DSI_CHECK(V > 0 && V < (int64_t{1} << 31), "score: vocabulary of ", V, " tokens");
  DSI_CHECK(n < (int64_t{1} << 31), "score: ", n, " rows in one call");
  score_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(logits, static_cast<int32_t>(V),
                                                                         rows, params, results, host_results);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel score_rows failed to launch: ", cudaGetErrorString(err));
}

}  // namespace dsinfer::cuda
