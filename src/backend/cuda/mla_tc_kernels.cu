// Tensor-core MLA decode over a bf16 latent cache (R = 512, P = 64, the DeepSeek-V2/V3 shape): one block of
// 8 warps per (query token, split of its context, group of 16 heads); the head groups of a token are adjacent
// blocks, so they share each cached tile through L2. Tiles of NT cached rows [latent | rope key] stream into
// shared memory with cp.async (two stages, the block table read two tiles ahead). S = Q K^T: each warp takes
// 4-5 of the 36 k-steps for all NT positions with its Q fragments in registers, and the partial scores are
// summed across warps in a fixed order; online softmax in shared memory; O += P V: each warp owns 64 of the
// 512 latent columns. mma.sync m16n8k16 (bf16 in, fp32 accumulate) with Q and P split into bf16 hi + lo, so
// only the cache's own rounding remains. Two instances: NT 64 (~188 KiB of shared memory, one block per SM:
// small batches, where few blocks run and each block's chain is the latency) and NT 32 (~96 KiB, two blocks
// per SM, so one block's barriers and softmax overlap the other's MMAs and loads: large batches). Partial
// states have the layout of mla_kernels.cu's combine; with arrival counters the last split block of a
// (token, head group) merges them (mla_merge.cuh). Over a row list (the decode rows of a mixed step) launch
// token i is query token rows[i]: the same blocks and sums as a launch of those rows alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/mla_mma_frag.cuh"
#include "backend/cuda/mla_tc_block.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kLdK = kD + 8;
constexpr int kChunks = kD * 2 / 16;  // 16-byte chunks per cached row
constexpr int kKSteps = kD / 16;      // k-steps of S = Q K^T, spread over the warps (4 or 5 each)
static_assert(kKSteps > 4 * kWarps && kKSteps <= 5 * kWarps, "each warp takes 4 or 5 k-steps");
static_assert(kHeads == 2 * kWarps && kR == 64 * kWarps, "softmax: 2 heads per warp; PV: 64 columns");

template <int NT>
struct Smem {
  static constexpr int kLdP = NT + 8, kLdRed = NT + 8;
  __nv_bfloat16 k[2][NT * kLdK];                           // [stage][NT rows][576 (+8 pad)] cached rows
  float red[kWarps][kHeads][kLdRed];                       // [warp][16 heads][NT positions] partial scores
  __nv_bfloat16 p_hi[kHeads * kLdP], p_lo[kHeads * kLdP];  // [16 heads][NT] probabilities
  float m[kHeads], l[kHeads], c[kHeads];                   // running max, running sum, this tile's rescale
  int64_t slot[2][NT];                                     // [stage][row] cache slot (-1: past the end)
  int last;                                                // mla_arrive_last's verdict
};
// The fused merge's scratch is red: kTcMergeFloats (the host's bound) must fit both instances.
static_assert(sizeof(Smem<64>::red) / sizeof(float) >= kTcMergeFloats, "the fused merge's scratch is red");
static_assert(sizeof(Smem<32>::red) / sizeof(float) >= kTcMergeFloats, "the fused merge's scratch is red");
// Two NT-32 blocks (plus the 1 KiB the runtime reserves per block) fit the 228 KiB of a Hopper SM.
static_assert(2 * (sizeof(Smem<32>) + 1024) <= 228 * 1024, "two 32-row blocks per SM");

using frag::cp_async16;
using frag::cp_async_commit;
using frag::cp_async_wait;
using frag::ldmatrix_a;

// NT rows per tile; NT 64 runs one block per SM, NT 32 two (<= 128 registers a thread). kLo: Q and P as bf16
// hi + lo parts (two MMAs per product); else bf16 Q and P alone (one MMA, FlashMLA's precision). kSparse:
// the rows are the token's list plan.selected (attention_mla_sparse); skipped entries (below 0, or at or past
// the sequence's context) are zero rows scored -inf, and a head that saw none writes zeros.
template <int NT, bool kLo, bool kSparse>
__global__ void __launch_bounds__(kThreads, NT == 64 ? 1 : 2)
    mla_tc_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan, float* out,
                  float* ws_acc, float* ws_ml, int* arrivals, int H, float scale, int splits, int64_t chunk) {
  static_assert(NT == 32 || NT == 64, "tiles of 32 or 64 rows");
  constexpr int kLdP = Smem<NT>::kLdP;
  constexpr int kPos = NT / 32;  // softmax: positions per lane
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<NT>& sm = *reinterpret_cast<Smem<NT>*>(smem_raw);
  const detail::MlaTcBlock work = detail::mla_tc_block(plan, H, kHeads, chunk);
  const int64_t tl = work.tl, t = work.t;
  const int h0 = work.h0, hg = work.hg, split = work.split, begin = work.begin, end = work.end, bs = work.bs;
  const int32_t* blocks = work.blocks;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int ntiles = (end - begin + NT - 1) / NT;
  const int32_t* list = kSparse ? plan.selected + t * plan.selected_k : nullptr;  // [selected_k]
  const int ctx = kSparse ? plan.context_lens[plan.token_seq[t]] : 0;
  // The cache position of row `i` of the split's range, or -1 for a skipped entry (sparse) or past the end.
  auto position = [&](int i) -> int {
    if (i >= end) return -1;
    if (!kSparse) return i;
    const int p = list[i];
    return p >= 0 && p < ctx ? p : -1;
  };

  // Cache slot of row `tid` of tile `it` (-1 past the end); read by threads < NT only.
  auto slot_of = [&](int it) -> int64_t {
    const int pos = it < ntiles ? position(begin + it * NT + tid) : -1;
    return pos >= 0 ? static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs : -1;
  };
  // Tile `it` into stage it % 2 (rows past the end zero-filled, so P = 0 never meets garbage).
  auto issue_tile = [&](int it) {
    const int st = it % 2;
    // NT 32: not unrolled, which keeps the kernel within 128 registers without spills (--resource-usage).
#pragma unroll(NT == 64 ? 6 : 1)
    for (int i = tid; i < NT * kChunks; i += kThreads) {
      const int j = i / kChunks, c = i % kChunks;
      const int64_t slot = sm.slot[st][j];
      cp_async16(sm.k[st] + j * kLdK + c * 8, cache + (slot >= 0 ? slot : 0) * kD + c * 8, slot >= 0);
    }
    cp_async_commit();
  };

  int64_t next_slot = -1;  // threads < NT: slot of their row of tile it + 2
  if (tid < NT) {
    sm.slot[0][tid] = slot_of(0);
    sm.slot[1][tid] = slot_of(1);
  }
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  __syncthreads();
  if (ntiles > 0) issue_tile(0);
  if (tid < NT) next_slot = slot_of(2);

  // This warp's k-steps of S = Q K^T: k0 = 16 (warp + 8 i), i < nk (36 k-steps over 8 warps). Its Q
  // fragments (hi + lo bf16 parts of the fp32 queries; heads past the last are zero) stay in registers.
  const int nk = warp < kKSteps - 4 * kWarps ? 5 : 4;
  uint32_t qh[5][4], ql[5][4];
  frag::load_q_fragments<kLo, kWarps, kR, kP>(q_lat, q_pe, t * H + h0, hg, warp, nk, lane, qh, ql);

  float acc[8][4];  // O [16 heads, this warp's 64 latent columns 64 warp + 8 j + ...]
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  for (int it = 0; it < ntiles; ++it) {
    const int j0 = begin + it * NT;
    cp_async_wait<0>();
    __syncthreads();  // tile it visible; every warp is done with tile it - 1 (its stage, P and red)
    if (it + 1 < ntiles) issue_tile(it + 1);
    const __nv_bfloat16* kt = sm.k[it % 2];
    // Partial S [16, NT] over this warp's k-steps, then to red[warp].
    {
      float s[NT / 8][4];
#pragma unroll
      for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[j][c] = 0.0f;
#pragma unroll
      for (int i = 0; i < 5; ++i) {
        if (i < nk) {
          const int k0 = 16 * (warp + kWarps * i);
#pragma unroll
          for (int j = 0; j < NT / 8; j += 2) {
            uint32_t b[4];
            frag::ldmatrix_bt(b, kt, kLdK, j * 8, k0, lane);
            mma_bf16(s[j], qh[i], b);
            if (kLo) mma_bf16(s[j], ql[i], b);
            mma_bf16(s[j + 1], qh[i], b + 2);
            if (kLo) mma_bf16(s[j + 1], ql[i], b + 2);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < NT / 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(&sm.red[warp][g][col]) = make_float2(s[j][0], s[j][1]);
        *reinterpret_cast<float2*>(&sm.red[warp][g + 8][col]) = make_float2(s[j][2], s[j][3]);
      }
    }
    // Slots of tile it + 2 into the stage tile it's slots used (issued last iteration), then prefetch the
    // block table for tile it + 3: its latency hides behind this tile.
    if (tid < NT) {
      sm.slot[it % 2][tid] = next_slot;
      next_slot = slot_of(it + 3);
    }
    __syncthreads();
    // Online softmax: warp w updates heads 2w and 2w + 1, positions lane + 32 k (k < NT / 32). S sums the
    // warps' partials in a fixed order.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = 2 * warp + hh;
      float s[kPos];
      float mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < kPos; ++k) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += sm.red[w][h][lane + 32 * k];
        s[k] = position(j0 + lane + 32 * k) >= 0 ? v * scale : -INFINITY;
        mx = fmaxf(mx, s[k]);
      }
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, mx);  // dense: finite (position j0 < end)
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kPos; ++k) {
        const float p = s[k] == -INFINITY ? 0.0f : expf(s[k] - m_new);
        sum += p;
        const __nv_bfloat16 hi = __float2bfloat16_rn(p);
        sm.p_hi[h * kLdP + lane + 32 * k] = hi;
        if (kLo) sm.p_lo[h * kLdP + lane + 32 * k] = __float2bfloat16_rn(p - __bfloat162float(hi));
      }
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        // 0 on the first tile; sparse: 1 while the head has seen no position (m still -inf)
        const float corr = kSparse && m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
        sm.c[h] = corr;
        sm.l[h] = sm.l[h] * corr + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();
    // O [16, 512] += P [16, NT] V [NT, 512]: warp w owns latent columns [64w, 64w + 64).
    {
      const float c_lo = sm.c[g], c_hi = sm.c[g + 8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        acc[j][0] *= c_lo;
        acc[j][1] *= c_lo;
        acc[j][2] *= c_hi;
        acc[j][3] *= c_hi;
      }
#pragma unroll
      for (int k0 = 0; k0 < NT; k0 += 16) {
        uint32_t ah[4], al[4] = {};
        ldmatrix_a(ah, sm.p_hi, kLdP, 0, k0, lane);
        if (kLo) ldmatrix_a(al, sm.p_lo, kLdP, 0, k0, lane);
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          uint32_t b[4];
          frag::ldmatrix_v(b, kt, kLdK, k0, warp * 64 + j * 8, lane);
          mma_bf16(acc[j], ah, b);
          if (kLo) mma_bf16(acc[j], al, b);
          mma_bf16(acc[j + 1], ah, b + 2);
          if (kLo) mma_bf16(acc[j + 1], al, b + 2);
        }
      }
    }
  }
  __syncthreads();  // sm.l of the last tile (or the initial state of an empty split) is visible

  // The partial state (or, unsplit, the output) and the fused merge: the merge's weights in sm.red (free
  // after the last tile; hg * splits <= kTcMergeFloats - 16, checked on the host), 1 / sums in sm.c.
  detail::mla_tc_finish(acc, sm.m, sm.l, out, ws_acc, ws_ml, arrivals, tl, t, H, kR, h0, hg, split, splits,
                        &sm.last, &sm.red[0][0][0], sm.c);
}

// Dynamic shared memory of an instance (and, for the two-block one, the largest carveout so that two fit).
template <int NT, bool kLo, bool kSparse>
bool configure_instance() {
  bool ok = cudaFuncSetAttribute(mla_tc_kernel<NT, kLo, kSparse>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(sizeof(Smem<NT>))) == cudaSuccess;
  if (ok && NT == 32)
    ok = cudaFuncSetAttribute(mla_tc_kernel<NT, kLo, kSparse>, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared) == cudaSuccess;
  if (!ok) cudaGetLastError();
  return ok;
}

}  // namespace

bool mla_tc_supported(int64_t R, int64_t P, bool cache_bf16, uintptr_t cache, uintptr_t q_lat,
                      uintptr_t q_pe) {
  if (!(cache_bf16 && R == kR && P == kP && cache % 16 == 0 && q_lat % 16 == 0 && q_pe % 16 == 0))
    return false;
  // The 64-row tiles need ~188 KiB of shared memory: Hopper has it, an A100 (163 KiB) does not. Both
  // instances are configured here, once, outside any capture.
  static const bool fits = configure_instance<64, true, false>() && configure_instance<32, true, false>() &&
                           configure_instance<64, false, false>() && configure_instance<32, false, false>() &&
                           configure_instance<64, true, true>() && configure_instance<32, true, true>() &&
                           configure_instance<64, false, true>() && configure_instance<32, false, true>();
  return fits;
}

void launch_attention_mla_tc(const float* q_lat, const float* q_pe, const uint16_t* cache,
                             const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml, int* arrivals,
                             int64_t T, int64_t H, float scale, const MlaSplit& split) {
  const int64_t groups = (H + kHeads - 1) / kHeads;
  const int nt = split.tile_rows;
  DSI_CHECK((nt == 32 || nt == 64) && T * groups < (int64_t{1} << 31) && split.splits < 65536 &&
                split.chunk % nt == 0,
            "attention_mla (tensor cores): bad launch shape");
  const dim3 grid(static_cast<unsigned>(T * groups), static_cast<unsigned>(split.splits));
  auto launch = [&](auto kernel, size_t smem) {
    launch_pdl(kernel, grid, kThreads, smem, q_lat, q_pe, cache, plan, out, ws_acc, ws_ml, arrivals,
               static_cast<int>(H), scale, split.splits, split.chunk);
  };
  auto launch_nt = [&](auto sparse) {
    constexpr bool kSparse = decltype(sparse)::value;
    if (nt == 64)
      split.bf16_qp ? launch(mla_tc_kernel<64, false, kSparse>, sizeof(Smem<64>))
                    : launch(mla_tc_kernel<64, true, kSparse>, sizeof(Smem<64>));
    else
      split.bf16_qp ? launch(mla_tc_kernel<32, false, kSparse>, sizeof(Smem<32>))
                    : launch(mla_tc_kernel<32, true, kSparse>, sizeof(Smem<32>));
  };
  if (plan.selected)
    launch_nt(std::true_type{});
  else
    launch_nt(std::false_type{});
  check_launch("attention_mla (tensor cores)");
}

}  // namespace dsinfer::cuda
