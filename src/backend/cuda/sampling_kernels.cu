// The batched sampling kernel: one 512-thread block per row of logits (see sampling_kernels.h for the
// semantics). Every selection is a search for the largest key t with pred(count(K >= t), mass(K >= t)) over
// 64-bit keys K = (order-preserving bits of the value) << idbits | (V - 1 - id), which are distinct and order
// tokens by (value desc, id asc) exactly as the host does. Reductions use a fixed thread-to-element mapping
// and a fixed combine order, so a row's result depends only on its inputs.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/feed_device.cuh"
#include "backend/cuda/float_order.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/publish_result.cuh"
#include "backend/cuda/sampling_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kNT = 15;  // thresholds per counting pass (16-way search)
constexpr int64_t kMaxCandidates = 16384;
constexpr uint64_t kNoThreshold = ~uint64_t{0};
constexpr int64_t kRowPartElems = 4096;  // logits per block of a split row max (2 float4 loads a thread)
constexpr int kMaxRowParts = 64;

__device__ __forceinline__ uint64_t umax64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}
__device__ __forceinline__ uint64_t umin64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

struct Keys {
  int idbits;
  int32_t vocab;
  __device__ uint64_t make(float value, int32_t id) const {
    return (static_cast<uint64_t>(ordered_bits(value)) << idbits) | static_cast<uint64_t>(vocab - 1 - id);
  }
  __device__ int32_t id_of(uint64_t key) const {
    return vocab - 1 - static_cast<int32_t>(key & ((uint64_t{1} << idbits) - 1));
  }
  __device__ uint64_t high(uint64_t key) const { return key >> idbits; }
};

// Element sources: value(i) orders the element, mass(i) is what top-p sums, id(i) its token id.
struct RowWeights {  // w = exp((x - max) / T) over a full row
  const float* x;
  float max;
  float temperature;
  __device__ float value(int i) const { return expf(__fdiv_rn(__fsub_rn(x[i], max), temperature)); }
  __device__ float mass_of(float v) const { return v; }
  __device__ int32_t id(int i) const { return i; }
};
struct RowRaw {  // raw logits; mass exp(x - max) sums to the softmax normaliser
  const float* x;
  float max;
  __device__ float value(int i) const { return x[i]; }
  __device__ float mass_of(float v) const { return expf(v - max); }
  __device__ int32_t id(int i) const { return i; }
};
struct List {  // compacted candidates (values as the source they came from computed them)
  const int32_t* ids;
  const float* values;
  bool weights;  // mass = value (weights) or 0 (raw: only counts are searched)
  __device__ float value(int i) const { return values[i]; }
  __device__ float mass_of(float v) const { return weights ? v : 0.0f; }
  __device__ int32_t id(int i) const { return ids[i]; }
};

struct Shared {
  uint64_t thr[kNT];
  int nthr;
  uint32_t cnt[kNT];
  double mass[kNT];
  uint32_t red_cnt[kWarps][kNT];
  double red_mass[kWarps][kNT];
  uint64_t red_u64[kWarps];
  double red_f64[kWarps];
  int32_t red_i32[kWarps];
  uint64_t top_keys[kSampleMaxTopLogprobs];
  int top_n;
  int32_t token;
  int last_part;  // row_max_parts: this block arrived last
  double scan[kThreads];
};

__device__ uint64_t block_max_u64(uint64_t v, Shared& sm) {
  for (int o = 16; o > 0; o /= 2) v = umax64(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) sm.red_u64[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t r = sm.red_u64[0];
  for (int w = 1; w < kWarps; ++w) r = umax64(r, sm.red_u64[w]);
  __syncthreads();
  return r;
}
__device__ uint64_t block_min_u64(uint64_t v, Shared& sm) {
  for (int o = 16; o > 0; o /= 2) v = umin64(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) sm.red_u64[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t r = sm.red_u64[0];
  for (int w = 1; w < kWarps; ++w) r = umin64(r, sm.red_u64[w]);
  __syncthreads();
  return r;
}
__device__ int32_t block_or_i32(int32_t v, Shared& sm) {
  for (int o = 16; o > 0; o /= 2) v |= __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) sm.red_i32[threadIdx.x / 32] = v;
  __syncthreads();
  int32_t r = 0;
  for (int w = 0; w < kWarps; ++w) r |= sm.red_i32[w];
  __syncthreads();
  return r;
}

// sm.cnt[j] / sm.mass[j] = count / mass of the elements [0, n) of src with key >= sm.thr[j].
template <class Src>
__device__ void count_pass(const Src& src, int n, const Keys& keys, Shared& sm) {
  uint64_t t[kNT];
  uint32_t cnt[kNT];
  double mass[kNT];
  uint64_t tmin = kNoThreshold, tmax = 0;
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    t[j] = j < sm.nthr ? sm.thr[j] : kNoThreshold;
    cnt[j] = 0;
    mass[j] = 0.0;
    if (j < sm.nthr) {
      tmin = umin64(tmin, t[j]);
      tmax = umax64(tmax, t[j]);
    }
  }
  // Elements below every threshold count for none, those at or above the largest for all: only the ones in
  // between (few, once a search has narrowed its bracket) are compared with each threshold.
  uint32_t all_cnt = 0;
  double all_mass = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = src.value(i);
    const uint64_t k = keys.make(v, src.id(i));
    if (k < tmin) continue;
    const double m = src.mass_of(v);
    if (k >= tmax) {
      ++all_cnt;
      all_mass += m;
      continue;
    }
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      if (k >= t[j]) {
        ++cnt[j];
        mass[j] += m;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    cnt[j] += all_cnt;
    mass[j] += all_mass;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    uint32_t c = cnt[j];
    double m = mass[j];
    for (int o = 16; o > 0; o /= 2) {
      c += __shfl_xor_sync(0xffffffffu, c, o);
      m += __shfl_xor_sync(0xffffffffu, m, o);
    }
    if (lane == 0) {
      sm.red_cnt[warp][j] = c;
      sm.red_mass[warp][j] = m;
    }
  }
  __syncthreads();
  if (threadIdx.x < kNT) {
    uint32_t c = 0;
    double m = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      c += sm.red_cnt[w][threadIdx.x];
      m += sm.red_mass[w][threadIdx.x];
    }
    sm.cnt[threadIdx.x] = c;
    sm.mass[threadIdx.x] = m;
  }
  __syncthreads();
}

// Min and max key of the elements with lo <= key <= hi (kNoThreshold / 0 when there is none).
template <class Src>
__device__ void key_range(const Src& src, int n, const Keys& keys, uint64_t lo, uint64_t hi, Shared& sm,
                          uint64_t* kmin, uint64_t* kmax) {
  uint64_t mn = kNoThreshold, mx = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const uint64_t k = keys.make(src.value(i), src.id(i));
    if (k >= lo && k <= hi) {
      mn = umin64(mn, k);
      mx = umax64(mx, k);
    }
  }
  *kmin = block_min_u64(mn, sm);
  *kmax = block_max_u64(mx, sm);
}

struct Found {
  uint64_t key;
  uint32_t cnt;
  double mass;
  bool ok;  // pred(lo) held
};

// The largest key t in [lo, hi] with pred(count(K >= t), mass(K >= t)) (pred monotone: true at small t).
// hi must be at least the largest key of the source, or pred must fail at hi + 1.
template <class Src, class Pred>
__device__ Found search(const Src& src, int n, const Keys& keys, uint64_t lo, uint64_t hi, Pred pred,
                        Shared& sm) {
  Found f{lo, 0, 0.0, false};
  bool first = true;
  bool narrowed = false;
  while (first || lo < hi) {
    if (!first && !narrowed && keys.high(lo) == keys.high(hi)) {
      // One value left: its tokens differ only by id. Usually there is a single one.
      uint64_t kmin, kmax;
      key_range(src, n, keys, lo, hi, sm, &kmin, &kmax);
      narrowed = true;
      if (kmax < kmin) break;  // no element in [lo, hi]: lo is the answer
      lo = umax64(lo, kmin);   // count(K >= kmin) == count(K >= lo)
      hi = kmax;               // no element above kmax up to hi: pred fails there
      if (lo >= hi) break;
    }
    if (threadIdx.x == 0) {
      int k = 0;
      if (first) sm.thr[k++] = lo;
      if (lo < hi) {
        const uint64_t hlo = keys.high(lo), hhi = keys.high(hi);
        const int slots = kNT - k;
        if (hhi > hlo) {  // split the value bits first
          const uint64_t span = hhi - hlo;
          if (span <= static_cast<uint64_t>(slots)) {
            for (uint64_t h = hlo + 1; h <= hhi; ++h) sm.thr[k++] = h << keys.idbits;
          } else {
            const uint64_t step = span / (slots + 1);
            for (int j = 0; j < slots; ++j) sm.thr[k++] = (hlo + step * (j + 1)) << keys.idbits;
          }
        } else {
          const uint64_t span = hi - lo;
          if (span <= static_cast<uint64_t>(slots)) {
            for (uint64_t t = lo + 1; t <= hi; ++t) sm.thr[k++] = t;
          } else {
            const uint64_t step = span / (slots + 1);
            for (int j = 0; j < slots; ++j) sm.thr[k++] = lo + step * (j + 1);
          }
        }
      }
      sm.nthr = k;
    }
    __syncthreads();
    count_pass(src, n, keys, sm);
    int j = 0;
    if (first) {
      f.cnt = sm.cnt[0];
      f.mass = sm.mass[0];
      if (!pred(f.cnt, f.mass)) {
        __syncthreads();
        return f;
      }
      f.ok = true;
      j = 1;
      first = false;
    }
    uint64_t new_hi = hi;
    for (; j < sm.nthr; ++j) {
      if (pred(sm.cnt[j], sm.mass[j])) {
        lo = sm.thr[j];
        f.cnt = sm.cnt[j];
        f.mass = sm.mass[j];
      } else {
        new_hi = sm.thr[j] - 1;
        break;
      }
    }
    hi = new_hi;
    __syncthreads();  // sm.thr / sm.cnt are rewritten next pass
  }
  f.key = lo;
  return f;
}

// Copies the elements of src with key >= lo to (ids, values), in source order.
template <class Src>
__device__ void compact(const Src& src, int n, const Keys& keys, uint64_t lo, int32_t* ids, float* values,
                        Shared& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int base = 0;
  for (int start = 0; start < n; start += kThreads) {
    const int i = start + threadIdx.x;
    float v = 0.0f;
    bool keep = false;
    if (i < n) {
      v = src.value(i);
      keep = keys.make(v, src.id(i)) >= lo;
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) sm.red_i32[warp] = __popc(ballot);
    __syncthreads();
    int offset = base, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) offset += sm.red_i32[w];
      total += sm.red_i32[w];
    }
    if (keep) {
      const int pos = offset + __popc(ballot & ((1u << lane) - 1u));
      ids[pos] = src.id(i);
      values[pos] = v;
    }
    base += total;
    __syncthreads();
  }
}

// Philox4x32-10 (Salmon et al., SC'11): 4 random words for a 128-bit counter under a 64-bit key.
__device__ uint4 philox(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}

// A uniform double in [0, 1) (53 bits) for draw `draw` of a request seeded with `seed`.
__device__ double uniform(uint64_t seed, uint64_t draw) {
  const uint4 r =
      philox(make_uint4(0u, static_cast<uint32_t>(draw), static_cast<uint32_t>(draw >> 32), 0x53414D50u),
             make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  return (static_cast<double>(r.x >> 5) * 67108864.0 + static_cast<double>(r.y >> 6)) * 0x1.0p-53;
}

// Draws a kept element (key >= kept) in proportion to its mass: u * (kept mass) located in the cumulative
// mass in source order. Each thread owns a contiguous segment; a block scan of the segment sums (boundaries
// shared exactly between neighbours) picks the segment, its thread walks it. `fallback` (the argmax) answers
// if rounding puts the target past the end, as on the host.
template <class Src>
__device__ int32_t draw_token(const Src& src, int n, const Keys& keys, uint64_t kept, uint64_t seed,
                              uint64_t draw, int32_t fallback, Shared& sm) {
  const int seg = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * seg), end = min(n, begin + seg);
  double sum = 0.0;
  for (int i = begin; i < end; ++i) {
    const float w = src.value(i);
    if (keys.make(w, src.id(i)) >= kept) sum += w;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  double incl = sum;
  for (int o = 1; o < 32; o *= 2) {
    const double up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  if (lane == 31) sm.red_f64[warp] = incl;
  if (threadIdx.x == 0) sm.token = -1;
  __syncthreads();
  double warp_base = 0.0;
  for (int w = 0; w < warp; ++w) warp_base += sm.red_f64[w];
  sm.scan[threadIdx.x] = warp_base + incl;
  __syncthreads();
  const double before = threadIdx.x > 0 ? sm.scan[threadIdx.x - 1] : 0.0;
  const double after = sm.scan[threadIdx.x];
  const double r = uniform(seed, draw) * sm.scan[kThreads - 1];
  if (sum > 0.0 && r >= before && r < after) {
    double cumulative = before;
    int32_t last = -1;
    for (int i = begin; i < end; ++i) {
      const float w = src.value(i);
      const int32_t id = src.id(i);
      if (keys.make(w, id) < kept) continue;
      last = id;
      cumulative += w;
      if (r < cumulative) break;
    }
    sm.token = last;  // the walk may fall short of r by rounding: its last kept element then
  }
  __syncthreads();
  const int32_t token = sm.token >= 0 ? sm.token : fallback;
  __syncthreads();
  return token;
}

// Collects the elements of src with key >= kept (at most kSampleMaxTopLogprobs) into sm.top_*, best first.
template <class Src>
__device__ void collect_top(const Src& src, int n, const Keys& keys, uint64_t kept, Shared& sm) {
  if (threadIdx.x == 0) sm.top_n = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const uint64_t k = keys.make(src.value(i), src.id(i));
    if (k >= kept) {
      const int slot = atomicAdd(&sm.top_n, 1);
      if (slot < kSampleMaxTopLogprobs) sm.top_keys[slot] = k;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int m = min(sm.top_n, kSampleMaxTopLogprobs);
    for (int a = 1; a < m; ++a) {  // insertion sort, key desc
      const uint64_t k = sm.top_keys[a];
      int b = a - 1;
      while (b >= 0 && sm.top_keys[b] < k) {
        sm.top_keys[b + 1] = sm.top_keys[b];
        --b;
      }
      sm.top_keys[b + 1] = k;
    }
    sm.top_n = m;
  }
  __syncthreads();
}

struct RowMax {
  float value;
  int32_t id;
  int32_t error;
};

// The block's max key (keys.make's order: the value, then the lowest id) of x[begin, end), 0 when the range
// is empty, and in *bad whether some value there is NaN or +inf. Each thread visits its elements in
// increasing index order (an unaligned head, then 16-byte loads, then the tail), keeping the first of its
// largest ordered values, with several loads in flight per thread. Max over keys is order-free, so any split
// of a row into ranges gives the whole row's key.
__device__ uint64_t range_max_key(const float* x, int32_t begin, int32_t end, const Keys& keys, Shared& sm,
                                  int32_t* bad_out) {
  uint32_t best_bits = 0;
  int32_t best_i = -1;
  int32_t bad = 0;
  auto visit = [&](float v, int32_t i) {
    if (isnan(v) || v == INFINITY) bad = 1;
    const uint32_t b = ordered_bits(v);
    if (best_i < 0 || b > best_bits) {
      best_bits = b;
      best_i = i;
    }
  };
  const float* y = x + begin;  // [n]
  const int32_t n = end - begin;
  const int32_t head = min(n, static_cast<int32_t>(((16 - (reinterpret_cast<uintptr_t>(y) & 15)) & 15) / 4));
  for (int32_t i = threadIdx.x; i < head; i += kThreads) visit(y[i], begin + i);
  const int32_t nvec = (n - head) / 4;
  const float4* yv = reinterpret_cast<const float4*>(y + head);  // [nvec] 16-byte aligned
#pragma unroll 4
  for (int32_t c = threadIdx.x; c < nvec; c += kThreads) {
    const float4 v = yv[c];
    const int32_t i = begin + head + 4 * c;
    visit(v.x, i);
    visit(v.y, i + 1);
    visit(v.z, i + 2);
    visit(v.w, i + 3);
  }
  for (int32_t i = head + 4 * nvec + threadIdx.x; i < n; i += kThreads) visit(y[i], begin + i);
  const uint64_t best = best_i < 0 ? 0
                                   : (static_cast<uint64_t>(best_bits) << keys.idbits) |
                                         static_cast<uint64_t>(keys.vocab - 1 - best_i);
  *bad_out = block_or_i32(bad, sm);
  return block_max_u64(best, sm);
}

__device__ RowMax row_max_of_key(uint64_t best, int32_t bad, const Keys& keys) {
  RowMax r;
  r.value = from_ordered_bits(static_cast<uint32_t>(best >> keys.idbits));
  r.id = keys.id_of(best);
  r.error = bad ? kSampleBadLogit : (r.value == -INFINITY ? kSampleAllMasked : kSampleOk);
  return r;
}

// Max (lowest id on ties) of x[0, V) and whether some value is NaN / +inf or all are -inf, by one block.
__device__ RowMax row_max(const float* x, const Keys& keys, int32_t V, Shared& sm) {
  int32_t bad = 0;
  const uint64_t best = range_max_key(x, 0, V, keys, sm, &bad);
  return row_max_of_key(best, bad, keys);
}

// The key of this block's part of a row max split over the row's gridDim.x blocks (SampleRowWork), and in
// *bad whether the part holds a NaN / +inf.
__device__ uint64_t row_part_key(const float* x, const Keys& keys, int32_t V, Shared& sm, int32_t* bad) {
  const int parts = static_cast<int>(gridDim.x), part = static_cast<int>(blockIdx.x);
  const int32_t per = static_cast<int32_t>(((static_cast<int64_t>(V) + parts - 1) / parts + 3) / 4 * 4);
  const int32_t begin = min(V, part * per), end = min(V, begin + per);
  return range_max_key(x, begin, end, keys, sm, bad);
}

// The row max of the raw logits split over the row's gridDim.x blocks, from each block's part (row_part_key):
// the last block to arrive (counted on the row's counter, which it resets for the next launch) gathers the
// parts and returns true with *mx, the others return false and are done. The same RowMax as row_max.
__device__ bool row_max_parts(uint64_t key, int32_t bad, const Keys& keys, const SampleRowWork& ws, int64_t r,
                              Shared& sm, RowMax* mx) {
  const int parts = static_cast<int>(gridDim.x), part = static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) {
    ws.part_keys[r * parts + part] = key;
    ws.part_bad[r * parts + part] = bad;
    __threadfence();  // the part is visible before the arrival that counts it
    sm.last_part = atomicAdd(&ws.counters[r], 1u) == static_cast<unsigned>(parts - 1) ? 1 : 0;
  }
  __syncthreads();
  if (!sm.last_part) return false;  // the whole block leaves together
  __threadfence();                  // every counted part is visible to this block's reads below
  uint64_t best = 0;
  int32_t any_bad = 0;
  for (int i = threadIdx.x; i < parts; i += kThreads) {
    best = umax64(best, __ldcg(&ws.part_keys[r * parts + i]));
    any_bad |= __ldcg(&ws.part_bad[r * parts + i]);
  }
  if (threadIdx.x == 0) ws.counters[r] = 0u;
  any_bad = block_or_i32(any_bad, sm);
  best = block_max_u64(best, sm);
  *mx = row_max_of_key(best, any_bad, keys);
  return true;
}

// Chooses the token of a row with temperature > 0 from its penalised logits x.
__device__ int32_t sample_token(const float* x, const RowMax& mx, const SampleRowParams& p, const Keys& keys,
                                int32_t V, int32_t* cand_ids, float* cand_values, int64_t capacity,
                                Shared& sm) {
  const RowWeights row{x, mx.value, p.temperature};
  const uint64_t lo_all = keys.make(FLT_TRUE_MIN, V - 1);  // every w > 0 (w == 0 is never kept)
  const uint64_t hi = keys.make(1.0f, mx.id);              // the argmax: w == 1
  const bool min_p_on = p.min_p > 0.0f;
  const uint64_t k_min = min_p_on ? (static_cast<uint64_t>(ordered_bits(p.min_p)) << keys.idbits) : 0;
  if (p.top_k <= 0 && p.top_p >= 1.0f && !min_p_on) {  // no filter: draw over every positive weight
    return draw_token(row, V, keys, lo_all, p.seed, p.draw_index, mx.id, sm);
  }
  // Ladder pass: every positive weight, the min-p cut and fixed weight cuts.
  if (threadIdx.x == 0) {
    const float cuts[] = {0.5f,  0.25f, 0.1f,  0.05f, 0.02f, 1e-2f, 3e-3f,
                          1e-3f, 1e-4f, 1e-5f, 1e-6f, 1e-8f, 1e-10f};
    int k = 0;
    sm.thr[k++] = lo_all;
    sm.thr[k++] = min_p_on ? k_min : lo_all;
    for (float c : cuts) sm.thr[k++] = static_cast<uint64_t>(ordered_bits(c)) << keys.idbits;
    sm.nthr = k;
  }
  __syncthreads();
  count_pass(row, V, keys, sm);
  const uint32_t positive = sm.cnt[0];
  const double total = sm.mass[0];
  const bool k_on = p.top_k > 0 && static_cast<uint32_t>(p.top_k) < positive;
  const bool p_on = p.top_p < 1.0f;
  uint64_t kept = lo_all;
  int32_t token = mx.id;
  if (k_on || p_on || min_p_on) {
    // The tightest cut that certainly holds everything the searches below need.
    uint64_t cut = lo_all;
    uint32_t cut_cnt = positive;
    const double p_target = static_cast<double>(p.top_p) * total;
    for (int j = 1; j < sm.nthr; ++j) {
      const bool holds = (k_on && sm.cnt[j] >= static_cast<uint32_t>(p.top_k)) ||
                         (!k_on && p_on && sm.mass[j] >= p_target * (1.0 + 1e-9)) ||
                         (!p_on && min_p_on && sm.thr[j] == k_min);
      if (holds && sm.thr[j] > cut) {
        cut = sm.thr[j];
        cut_cnt = sm.cnt[j];
      }
    }
    __syncthreads();
    const bool listed = cut_cnt <= capacity;
    if (listed) compact(row, V, keys, cut, cand_ids, cand_values, sm);
    const List list{cand_ids, cand_values, true};
    const int n = listed ? static_cast<int>(cut_cnt) : V;
    auto run = [&](auto&& pred, uint64_t lo) {
      return listed ? search(list, n, keys, lo, hi, pred, sm) : search(row, n, keys, lo, hi, pred, sm);
    };
    double k_mass = total;
    uint64_t k_key = cut;
    if (k_on) {
      const uint32_t k = static_cast<uint32_t>(p.top_k);
      const Found f = run([k](uint32_t c, double) { return c >= k; }, cut);
      if (f.ok) {
        k_key = f.key;
        k_mass = f.mass;
        kept = umax64(kept, f.key);
      }
    }
    if (p_on) {
      const double target = static_cast<double>(p.top_p) * k_mass;
      const Found f = run([target](uint32_t, double m) { return m >= target; }, k_key);
      kept = umax64(kept, f.key);  // !ok only by rounding at the cut: keep the cut
    }
    if (min_p_on) kept = umax64(kept, k_min);
    token = listed ? draw_token(list, n, keys, kept, p.seed, p.draw_index, mx.id, sm)
                   : draw_token(row, n, keys, kept, p.seed, p.draw_index, mx.id, sm);
  } else {
    token = draw_token(row, V, keys, kept, p.seed, p.draw_index, mx.id, sm);
  }
  return token;
}

// A row's parameters move in 8-byte pieces, one a thread.
static_assert(sizeof(SampleRowParams) % 8 == 0 && alignof(SampleRowParams) >= 8,
              "the row parameters are copied in 8-byte pieces");
constexpr int kParamPieces = static_cast<int>(sizeof(SampleRowParams) / 8);

// A row's parameters into shared memory by asynchronous copies (they may be page-locked host memory, a bus
// round trip away), so that the block can work on the logits meanwhile; staged_row_params waits for them.
__device__ __forceinline__ void stage_row_params(const SampleRowParams* from, SampleRowParams* to) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (threadIdx.x < kParamPieces) {
    const uint32_t dst =
        static_cast<uint32_t>(__cvta_generic_to_shared(reinterpret_cast<char*>(to))) + 8 * threadIdx.x;
    const char* src = reinterpret_cast<const char*>(from) + 8 * threadIdx.x;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  if (threadIdx.x < kParamPieces)
    reinterpret_cast<uint64_t*>(to)[threadIdx.x] = reinterpret_cast<const uint64_t*>(from)[threadIdx.x];
#endif
}

// A row's staged parameters into `to` (device memory), by the threads that staged them.
__device__ __forceinline__ void copy_row_params(const SampleRowParams& staged, SampleRowParams* to) {
  if (threadIdx.x < kParamPieces)
    reinterpret_cast<uint64_t*>(to)[threadIdx.x] = reinterpret_cast<const uint64_t*>(&staged)[threadIdx.x];
}

// The parameters stage_row_params staged, once every thread's copies have landed.
__device__ __forceinline__ SampleRowParams staged_row_params(const SampleRowParams& staged) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
  __syncthreads();
  return staged;
}

__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const float* logits, int32_t V, int idbits, const SampleRowParams* params,
                       const int32_t* seen, const int32_t* gen_ids, const int32_t* gen_counts,
                       const int32_t* bias_ids, const float* bias_values, const uint32_t* masks, float* work,
                       int32_t* cand_ids_all, float* cand_values_all, int64_t capacity,
                       SampleRowWork parts_ws, const int32_t* rows, SampleRowResult* results,
                       SampleRowResult* host_results, SampleRowParams* params_copy) {
  pdl_trigger();  // the next kernel (the next step's plan upload) may start reading the bus now
  __shared__ Shared sm;
  __shared__ SampleRowParams s_params;  // the row's parameters, staged asynchronously
  const int64_t r = rows != nullptr ? rows[blockIdx.y] : blockIdx.y;
  stage_row_params(params + r, &s_params);
  const Keys keys{idbits, V};
  const float* raw = logits + r * V;
  int32_t* cand_ids = cand_ids_all + blockIdx.y * capacity;  // the candidates of the launch's rows
  float* cand_values = cand_values_all + blockIdx.y * capacity;
  SampleRowResult& out = results[r];

  // A row split over several blocks (gridDim.x > 1): without penalties its max is taken by all of them and
  // the last one goes on alone; with penalties the first block does the whole row as with one. Each block
  // scans its part before it looks at the row's parameters, which may be page-locked host memory: their bus
  // round trip then overlaps the scan instead of preceding it (a row with penalties drops the part keys).
  int32_t part_bad = 0;
  const uint64_t part_key = gridDim.x > 1 ? row_part_key(raw, keys, V, sm, &part_bad) : 0;
  const SampleRowParams p = staged_row_params(s_params);
  if (params_copy != nullptr && blockIdx.x == 0) copy_row_params(s_params, params_copy + r);
  RowMax mx;
  bool have_max = false;
  if (gridDim.x > 1) {
    if (p.work_row >= 0) {
      if (blockIdx.x != 0) return;
    } else {
      if (!row_max_parts(part_key, part_bad, keys, parts_ws, r, sm, &mx)) return;
      have_max = true;
    }
  }

  // Penalised logits: a copy of the row with the penalties applied in the host's order.
  const float* x = raw;
  if (p.work_row >= 0) {
    float* w = work + static_cast<int64_t>(p.work_row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) w[i] = raw[i];
    __syncthreads();
    if (p.repetition_penalty != 1.0f) {
      for (int i = p.seen_begin + threadIdx.x; i < p.seen_end; i += kThreads) {
        const float v = w[seen[i]];
        w[seen[i]] = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
      }
    }
    __syncthreads();
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
      for (int i = p.gen_begin + threadIdx.x; i < p.gen_end; i += kThreads) {
        const float pen =
            __fadd_rn(p.presence_penalty, __fmul_rn(p.frequency_penalty, static_cast<float>(gen_counts[i])));
        w[gen_ids[i]] = __fsub_rn(w[gen_ids[i]], pen);
      }
    }
    __syncthreads();
    // logit_bias (distinct ids: no two threads write one logit).
    for (int i = p.bias_begin + threadIdx.x; i < p.bias_end; i += kThreads)
      w[bias_ids[i]] = __fadd_rn(w[bias_ids[i]], bias_values[i]);
    __syncthreads();
    // Constrained decoding: tokens outside the allowed set cannot be drawn.
    if (p.mask_begin >= 0) {
      const uint32_t* allowed = masks + p.mask_begin;
      for (int i = threadIdx.x; i < V; i += kThreads)
        if (!((allowed[i >> 5] >> (i & 31)) & 1u)) w[i] = -INFINITY;
    }
    __syncthreads();
    x = w;
  }
  if (!have_max) mx = row_max(x, keys, V, sm);
  if (mx.error != kSampleOk) {
    if (threadIdx.x == 0) write_result_header(out, host_results, r, -1, mx.error, 0.0f, 0);
    return;
  }
  const int32_t token = p.forced_token >= 0 ? p.forced_token
                        : p.temperature == 0.0f
                            ? mx.id
                            : sample_token(x, mx, p, keys, V, cand_ids, cand_values, capacity, sm);

  int num_top = 0;
  float logprob = 0.0f;
  if (p.logprobs > 0) {
    // log-softmax of the raw logits: the token's value and the top n (a count search on the raw keys).
    const RowMax rmx = x == raw ? mx : row_max(raw, keys, V, sm);
    const RowRaw row{raw, rmx.value};
    const int n = min(p.logprobs, min(V, kSampleMaxTopLogprobs));
    if (threadIdx.x == 0) {
      const float deltas[] = {0.5f,  1.0f,  2.0f,  3.0f,  4.0f,  6.0f, 8.0f,
                              12.0f, 16.0f, 24.0f, 32.0f, 48.0f, 64.0f};
      int k = 0;
      sm.thr[k++] = 0;
      for (float d : deltas) sm.thr[k++] = keys.make(rmx.value - d, V - 1);
      sm.nthr = k;
    }
    __syncthreads();
    count_pass(row, V, keys, sm);
    const double log_sum = log(sm.mass[0]);
    uint64_t cut = 0;
    uint32_t cut_cnt = sm.cnt[0];
    for (int j = 1; j < sm.nthr; ++j) {
      if (sm.cnt[j] >= static_cast<uint32_t>(n) && sm.thr[j] > cut) {
        cut = sm.thr[j];
        cut_cnt = sm.cnt[j];
      }
    }
    __syncthreads();
    const uint64_t hi = keys.make(rmx.value, rmx.id);
    const auto pred = [n](uint32_t c, double) { return c >= static_cast<uint32_t>(n); };
    if (cut_cnt <= capacity) {
      compact(row, V, keys, cut, cand_ids, cand_values, sm);
      const List list{cand_ids, cand_values, false};
      const Found f = search(list, static_cast<int>(cut_cnt), keys, cut, hi, pred, sm);
      collect_top(list, static_cast<int>(cut_cnt), keys, f.key, sm);
    } else {
      const Found f = search(row, V, keys, cut, hi, pred, sm);
      collect_top(row, V, keys, f.key, sm);
    }
    num_top = sm.top_n;
    if (threadIdx.x < num_top) {
      const uint64_t k = sm.top_keys[threadIdx.x];
      const float v = from_ordered_bits(static_cast<uint32_t>(k >> idbits));
      write_result_top(out, host_results, r, threadIdx.x, keys.id_of(k),
                       static_cast<float>(static_cast<double>(v) - rmx.value - log_sum));
    }
    logprob = static_cast<float>(static_cast<double>(raw[token]) - rmx.value - log_sum);
  }
  if (threadIdx.x == 0) write_result_header(out, host_results, r, token, kSampleOk, logprob, num_top);
}

}  // namespace

int64_t sample_candidate_capacity(int64_t vocab) {
  return vocab < kMaxCandidates ? vocab : kMaxCandidates;
}

int sample_row_parts(int64_t vocab) {
  const int64_t parts = (vocab + kRowPartElems - 1) / kRowPartElems;
  return static_cast<int>(parts < 2 ? 1 : parts > kMaxRowParts ? kMaxRowParts : parts);
}

void launch_sample_rows(const float* logits, int64_t R, int64_t V, const SampleRowParams* params,
                        const int32_t* seen, const int32_t* gen_ids, const int32_t* gen_counts,
                        const int32_t* bias_ids, const float* bias_values, const uint32_t* masks, float* work,
                        int32_t* cand_ids, float* cand_values, const SampleRowWork& parts,
                        SampleRowResult* results, SampleRowResult* host_results, const int32_t* rows,
                        SampleRowParams* params_copy) {
  if (R == 0) return;
  DSI_CHECK(params_copy == nullptr || params_copy != params, "sample: the parameters' copy is their source");
  DSI_CHECK(V > 0 && V < (int64_t{1} << 31), "sample: vocabulary of ", V, " tokens");
  DSI_CHECK(R <= 65535, "sample: ", R, " rows in one call, at most 65535");
  const bool split = parts.parts > 1 && parts.part_keys && parts.part_bad && parts.counters;
  DSI_CHECK(parts.parts <= kMaxRowParts, "sample: ", parts.parts, " blocks per row, at most ", kMaxRowParts);
  int idbits = 1;
  while ((int64_t{1} << idbits) < V) ++idbits;
  const dim3 grid(split ? static_cast<unsigned>(parts.parts) : 1u, static_cast<unsigned>(R));
  sample_rows_kernel<<<grid, kThreads, 0, stream()>>>(logits, static_cast<int32_t>(V), idbits, params, seen,
                                                      gen_ids, gen_counts, bias_ids, bias_values, masks, work,
                                                      cand_ids, cand_values, sample_candidate_capacity(V),
                                                      parts, rows, results, host_results, params_copy);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel sample_rows failed to launch: ", cudaGetErrorString(err));
}

namespace {

__global__ void feed_sampled_tokens_kernel(int32_t* token_ids, const int32_t* prev_rows, int32_t T,
                                           const SampleRowResult* results, int32_t R, int32_t vocab) {
  const int32_t t = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t < T) feed_sampled_token(token_ids, prev_rows, t, results, R, vocab);
}

}  // namespace

void launch_feed_sampled_tokens(int32_t* token_ids, const int32_t* prev_rows, int32_t T,
                                const SampleRowResult* results, int32_t R, int32_t vocab) {
  if (T == 0) return;
  constexpr int kFeedThreads = 256;
  feed_sampled_tokens_kernel<<<static_cast<unsigned>((T + kFeedThreads - 1) / kFeedThreads), kFeedThreads, 0,
                               stream()>>>(token_ids, prev_rows, T, results, R, vocab);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel feed_sampled_tokens failed to launch: ", cudaGetErrorString(err));
}

}  // namespace dsinfer::cuda
