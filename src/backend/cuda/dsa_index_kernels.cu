// DeepSeek-V3.2's lightning indexer on the GPU. The score kernel: one block per (query token, 64 cached
// keys); the token's queries [Hi, D] as bf16 high + low parts and the 64 keys (bf16 cache rows) are staged in
// shared memory, four warps take 16 keys each and form the dots [Hi, 16] on tensor cores (WMMA 16x16x16,
// two MMAs per tile: high and low parts), then one thread per key sums the weighted ReLU over the heads in
// head order. The top-k kernel: one block per query token finds the k-th largest score by a 4-pass radix
// select over the scores' order-preserving bits, then takes every position above it and the lowest
// positions equal to it, in position order, so the output is ascending.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "backend/cuda/dsa_index_kernels.h"
#include "backend/cuda/float_order.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kScoreThreads = 128;  // 4 warps: one 16-key column tile each
constexpr int kKeys = static_cast<int>(kIndexKeysPerBlock);
constexpr int kMaxHeads = 128;
constexpr int kMaxDim = 512;
constexpr int kSelectThreads = 512;
constexpr size_t kMaxSmemBytes = 200 * 1024;  // within every sm_80 / sm_90 opt-in limit

int padded_heads(int64_t Hi) {
  return static_cast<int>((Hi + 15) / 16 * 16);
}

// Shared memory of the score kernel: q high and low parts [Hp][D + 8] bf16, keys [64][D + 8] bf16, dots
// [Hp][64 + 4] f32, weights [Hp] f32. Row strides of D + 8 keep WMMA's 32-byte tile alignment and spread
// the rows over the banks.
size_t score_smem_bytes(int Hp, int64_t D) {
  const size_t ldq = static_cast<size_t>(D) + 8;
  return (2 * Hp + kKeys) * ldq * 2 + static_cast<size_t>(Hp) * (kKeys + 4) * 4 + static_cast<size_t>(Hp) * 4;
}

__global__ void __launch_bounds__(kScoreThreads) dsa_index_scores_kernel(IndexScoresArgs a, int Hp) {
  namespace wmma = nvcuda::wmma;
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x, t = a.t0 + i;
  const int64_t n = static_cast<int64_t>(a.plan.positions[t]) + 1;  // visible positions [0, n)
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kKeys;
  if (n <= a.top_k || j0 >= n) return;
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = static_cast<int>(a.D), Hi = static_cast<int>(a.Hi), ldq = D + 8, lds = kKeys + 4;
  __nv_bfloat16* q_hi = reinterpret_cast<__nv_bfloat16*>(smem);  // [Hp][ldq]
  __nv_bfloat16* q_lo = q_hi + Hp * ldq;                         // [Hp][ldq]
  __nv_bfloat16* k_s = q_lo + Hp * ldq;                          // [kKeys][ldq]
  float* dots = reinterpret_cast<float*>(k_s + kKeys * ldq);     // [Hp][lds]
  float* w_s = dots + Hp * lds;                                  // [Hp]
  const int tid = threadIdx.x;

  const float* q = a.q + t * Hi * D;  // [Hi, D]
  for (int e = tid; e < Hp * D; e += kScoreThreads) {
    const int h = e / D, d = e % D;
    const float v = h < Hi ? q[h * D + d] : 0.0f;
    const __nv_bfloat16 hi = __float2bfloat16_rn(v);
    q_hi[h * ldq + d] = hi;
    q_lo[h * ldq + d] = __float2bfloat16_rn(v - __bfloat162float(hi));
  }
  for (int h = tid; h < Hp; h += kScoreThreads) w_s[h] = h < Hi ? a.w[t * Hi + h] * a.weight_scale : 0.0f;
  const int32_t* blocks = a.plan.block_table + a.plan.block_table_indptr[a.plan.token_seq[t]];
  const int64_t bs = a.plan.block_size;
  const int pieces = D / 8;  // 16-byte pieces of a key row
  for (int e = tid; e < kKeys * pieces; e += kScoreThreads) {
    const int j = e / pieces, c = e % pieces;
    const int64_t pos = j0 + j;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (pos < n) {
      const int64_t slot = static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs;
      v = *reinterpret_cast<const uint4*>(a.keys + slot * D + c * 8);
    }
    *reinterpret_cast<uint4*>(k_s + j * ldq + c * 8) = v;
  }
  __syncthreads();

  const int warp = tid / 32;
  for (int mt = 0; mt < Hp / 16; ++mt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int ks = 0; ks < D / 16; ++ks) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> kf;  // [d, key]
      wmma::load_matrix_sync(kf, k_s + warp * 16 * ldq + ks * 16, ldq);
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> qf;  // [head, d]
      wmma::load_matrix_sync(qf, q_hi + mt * 16 * ldq + ks * 16, ldq);
      wmma::mma_sync(acc, qf, kf, acc);
      wmma::load_matrix_sync(qf, q_lo + mt * 16 * ldq + ks * 16, ldq);
      wmma::mma_sync(acc, qf, kf, acc);
    }
    wmma::store_matrix_sync(dots + mt * 16 * lds + warp * 16, acc, lds, wmma::mem_row_major);
  }
  __syncthreads();

  for (int j = tid; j < kKeys; j += kScoreThreads) {
    const int64_t pos = j0 + j;
    if (pos >= n) break;
    float score = 0.0f;
    for (int h = 0; h < Hi; ++h) score += w_s[h] * fmaxf(dots[h * lds + j] * a.scale, 0.0f);
    a.scores[i * a.ld + pos] = score + 0.0f;  // -0 as +0: a tie with the other zeros, as in the reference
  }
}

// Exclusive prefix count of `flag` over the block in thread order, and the block's total (every thread).
// Synchronises before returning, so it may be called again at once.
__device__ __forceinline__ unsigned block_count_before(bool flag, unsigned* total) {
  __shared__ unsigned warp_counts[kSelectThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  unsigned before = __popc(ballot & ((1u << lane) - 1u)), sum = 0;
  for (int w = 0; w < kSelectThreads / 32; ++w) {
    if (w < warp) before += warp_counts[w];
    sum += warp_counts[w];
  }
  *total = sum;
  __syncthreads();
  return before;
}

__global__ void __launch_bounds__(kSelectThreads)
    dsa_topk_kernel(const float* scores, int64_t ld, const int32_t* positions, int64_t t0, int64_t top_k,
                    int32_t* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x, t = t0 + i;
  const int64_t n = static_cast<int64_t>(positions[t]) + 1;
  int32_t* row = out + t * top_k;  // [top_k]
  const int tid = threadIdx.x;
  if (n <= top_k) {
    for (int64_t e = tid; e < top_k; e += kSelectThreads) row[e] = e < n ? static_cast<int32_t>(e) : -1;
    return;
  }
  const float* s = scores + i * ld;  // [n]
  __shared__ unsigned hist[256];
  __shared__ unsigned chosen_prefix, chosen_need;
  // The k-th largest key, 8 bits at a time from the top: `need` keys still to take among those matching
  // `prefix` under `mask`.
  unsigned prefix = 0, mask = 0, need = static_cast<unsigned>(top_k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kSelectThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t j = tid; j < n; j += kSelectThreads) {
      const unsigned key = ordered_bits(s[j]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      unsigned above = 0;
      int b = 255;
      for (; b > 0 && above + hist[b] < need; --b) above += hist[b];
      chosen_prefix = prefix | (static_cast<unsigned>(b) << shift);
      chosen_need = need - above;
    }
    __syncthreads();
    prefix = chosen_prefix;
    need = chosen_need;  // keys equal to the threshold to take, once every bit is fixed
    mask |= 255u << shift;
  }
  // Every key above the threshold, and the first `need` equal to it, in position order.
  unsigned taken = 0, equal_seen = 0;
  for (int64_t base = 0; base < n && taken < static_cast<unsigned>(top_k); base += kSelectThreads) {
    const int64_t j = base + tid;
    const unsigned key = j < n ? ordered_bits(s[j]) : 0u;
    const bool above = j < n && key > prefix, equal = j < n && key == prefix;
    unsigned equal_total = 0, take_total = 0;
    const unsigned equal_before = block_count_before(equal, &equal_total);
    const bool take = above || (equal && equal_seen + equal_before < need);
    const unsigned slot = block_count_before(take, &take_total);
    if (take) row[taken + slot] = static_cast<int32_t>(j);
    taken += take_total;
    equal_seen += equal_total;
  }
}

}  // namespace

bool dsa_index_scores_supported(int64_t Hi, int64_t D, uintptr_t keys) {
  return Hi > 0 && Hi <= kMaxHeads && D > 0 && D % 16 == 0 && D <= kMaxDim && keys % 16 == 0 &&
         score_smem_bytes(padded_heads(Hi), D) <= kMaxSmemBytes;
}

void launch_dsa_index_scores(const IndexScoresArgs& a) {
  DSI_CHECK(dsa_index_scores_supported(a.Hi, a.D, reinterpret_cast<uintptr_t>(a.keys)),
            "dsa_indexer_topk: the score kernel takes D a multiple of 16 up to ", kMaxDim, " and up to ",
            kMaxHeads, " heads, got D ", a.D, " and ", a.Hi, " heads");
  DSI_CHECK(a.ld > 0 && a.ld % kKeys == 0, "dsa_indexer_topk: bad scores row stride ", a.ld);
  if (a.count == 0) return;
  const int Hp = padded_heads(a.Hi);
  const size_t smem = score_smem_bytes(Hp, a.D);
  static size_t configured = 0;  // the largest dynamic shared memory size set so far
  if (smem > configured) {
    const cudaError_t err = cudaFuncSetAttribute(
        dsa_index_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess)
      fail("dsa_indexer_topk: cannot use ", smem, " bytes of shared memory: ", cudaGetErrorString(err));
    configured = smem;
  }
  const dim3 grid(static_cast<unsigned>(a.count), static_cast<unsigned>(a.ld / kKeys));
  launch_pdl(dsa_index_scores_kernel, grid, kScoreThreads, smem, a, Hp);
  check_launch("dsa_index_scores");
}

void launch_dsa_topk(const float* scores, int64_t ld, const int32_t* positions, int64_t t0, int64_t count,
                     int64_t top_k, int32_t* out) {
  DSI_CHECK(top_k > 0 && top_k < (int64_t{1} << 31), "dsa_indexer_topk: bad top_k ", top_k);
  if (count == 0) return;
  launch_pdl(dsa_topk_kernel, static_cast<unsigned>(count), kSelectThreads, 0, scores, ld, positions, t0,
             top_k, out);
  check_launch("dsa_topk");
}

}  // namespace dsinfer::cuda
