// Tensor-core MLA decode, second design (Hopper only; by default its two-block instance runs the large-batch
// plans, see mla_choose_split; DSINFER_MLA_KERNEL=v1 / v2 / v2x2 forces a design): the
// same blocks, sums of S and partial-state contract as mla_tc_kernels.cu (one block of 8 warps per (query
// token, split of its context, group of 16 heads); S = Q K^T with each warp's 4-5 k-steps of Q in registers
// and a fixed-order cross-warp sum; O += P V with each warp owning 64 latent columns; Q and P split into bf16
// hi + lo or bf16 alone), with a shorter per-tile chain and more bytes in flight:
// - tiles of 32 cached rows arrive by bulk copies (cp.async.bulk, one 1152-byte row per lane of warp 0,
//   completing on a per-stage mbarrier): no per-chunk address math, and KS stages (KS - 1 tiles in flight
//   while one is computed: 5 stages, ~149 KB in flight, in the one-block-per-SM instance);
// - two block barriers per tile instead of three (a stage is refilled after the barrier that follows S,
//   which every warp passes only once it is done with the previous tile);
// - the running sums stay per lane (summed once at the end), so the softmax exchanges only the maxima;
// - with 3 or more stages a software pipeline: the MMAs of S for tile it + 1 issue before those of P V for
//   tile it (independent chains back to back); every ldmatrix is issued a step ahead of the MMAs using it.
// Shared memory: KS x 37,376 B of tiles + 20,480 B of partial scores + 2,560 B of P (~205 KiB at KS 5, one
// block per SM; ~96 KiB at KS 2, two blocks). Registers (sm_90a): 165 / 140 (split / bf16 Q and P) at one
// block per SM, 128 / 126 at two; no spills.
// Rows past the end of a split repeat its last row (finite values whose probabilities are 0), so every tile
// is a whole transfer. Over a row list launch token i is query token rows[i], as in mla_tc_kernels.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/mla_mma_frag.cuh"
#include "backend/cuda/mla_tc_block.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/tma_common.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kNT = 32;                           // cached rows per tile: one per lane of the issuing warp
constexpr int kLdK = kD + 8;                      // smem row stride (elements): 1168 B, 16-byte aligned
constexpr int kLdP = kNT + 8, kLdRed = kNT + 8;   // padded rows of P and of the partial scores
constexpr int kKSteps = kD / 16;                  // k-steps of S = Q K^T, spread over the warps (4 or 5 each)
constexpr uint32_t kRowBytes = kD * 2;            // 1152 bytes per cached row
constexpr uint32_t kTileBytes = kNT * kRowBytes;  // 36,864 bytes per tile (one mbarrier transaction)
static_assert(kKSteps > 4 * kWarps && kKSteps <= 5 * kWarps, "each warp takes 4 or 5 k-steps");
static_assert(kHeads == 2 * kWarps && kR == 64 * kWarps, "softmax: 2 heads per warp; PV: 64 columns");
static_assert((kLdK * 2) % 16 == 0 && kRowBytes % 16 == 0, "bulk copies: 16-byte rows and destinations");
static_assert(kTileBytes < (1u << 20), "a tile's bytes fit an mbarrier's transaction count");

template <int KS>
struct SmemV2 {
  __nv_bfloat16 k[KS][kNT * kLdK];                         // [stage][32 rows][576 (+8 pad)] cached rows
  float red[kWarps][kHeads][kLdRed];                       // [warp][16 heads][32 positions] partial scores
  __nv_bfloat16 p_hi[kHeads * kLdP], p_lo[kHeads * kLdP];  // [16 heads][32] probabilities
  float c[kHeads];                                         // this tile's rescale of O
  float m[kHeads], l[kHeads];                              // final max and sum (after the last tile)
  uint64_t full[KS];                                       // [stage] mbarrier: the tile has landed
  const uint16_t* next[kNT];  // [row] warp 0: source of the next tile to issue (not a register: <= 128)
  int last;                   // mla_arrive_last's verdict
};
// The fused merge's scratch is red (kTcMergeFloats, the host's bound).
static_assert(sizeof(SmemV2<2>::red) / sizeof(float) >= kTcMergeFloats, "the fused merge's scratch is red");
// One block per SM: 5 stages (plus the 1 KiB the runtime reserves) within the 227 KiB a block may take; two
// blocks per SM: 2 stages each within the 228 KiB of an SM.
static_assert(sizeof(SmemV2<5>) + 1024 <= 227 * 1024, "five stages in one block");
static_assert(2 * (sizeof(SmemV2<2>) + 1024) <= 228 * 1024, "two blocks of two stages per SM");

using frag::ldmatrix_a;

}  // namespace

// ---- the bulk copy (sm_90; empty elsewhere: the kernel is never launched there); the mbarriers and the
// proxy fence are tma_common.cuh's ----
namespace mla_v2 {

using frag::smem_addr;

using tma::fence_proxy_async;

// `bytes` global -> shared by the copy engine, completing as transactions on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}

}  // namespace mla_v2

namespace {

using namespace mla_v2;

// KS stages of 32-row tiles; kBlocks resident blocks per SM (1: <= 255 registers, 2: <= 128). kLo: Q and P as
// bf16 hi + lo parts (two MMAs per product); else bf16 alone.
template <int KS, int kBlocks, bool kLo>
__global__ void __launch_bounds__(kThreads, kBlocks)
    mla_tc_v2_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan,
                     float* out, float* ws_acc, float* ws_ml, int* arrivals, int H, float scale, int splits,
                     int64_t chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(KS >= 2, "at least two stages");
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  SmemV2<KS>& sm = *reinterpret_cast<SmemV2<KS>*>(smem_raw);
  const detail::MlaTcBlock work = detail::mla_tc_block(plan, H, kHeads, chunk);
  const int64_t tl = work.tl, t = work.t;
  const int h0 = work.h0, hg = work.hg, split = work.split, begin = work.begin, end = work.end, bs = work.bs;
  const int32_t* blocks = work.blocks;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int ntiles = (end - begin + kNT - 1) / kNT;

  // Warp 0: the cache row of lane `lane` of tile it < ntiles (past the end: the split's last row).
  auto row_src = [&](int it) -> const uint16_t* {
    const int pos = min(begin + it * kNT + lane, end - 1);
    return cache + (static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs) * kD;
  };
  // Warp 0: tile it into stage it % KS, one row per lane.
  auto issue = [&](int it, const uint16_t* src) {
    const int st = it % KS;
    if (lane == 0) tma::mbar_arrive_expect_tx(smem_addr(&sm.full[st]), kTileBytes);
    __syncwarp();
    bulk_copy(sm.k[st] + lane * kLdK, src, kRowBytes, &sm.full[st]);
  };

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < KS; ++s) tma::mbar_init(smem_addr(&sm.full[s]), 1);
    tma::mbar_init_fence();
  }
  __syncthreads();
  if (warp == 0) {
    const uint16_t* src[KS];  // block-table reads of the first KS tiles, all in flight together
#pragma unroll
    for (int i = 0; i < KS; ++i) src[i] = i < ntiles ? row_src(i) : nullptr;
#pragma unroll
    for (int i = 0; i < KS - 1; ++i)
      if (i < ntiles) issue(i, src[i]);
    sm.next[lane] = src[KS - 1];  // tile KS - 1
  }

  // This warp's k-steps of S = Q K^T: k0 = 16 (warp + 8 i), i < nk. Its Q fragments (hi + lo bf16 parts of
  // the fp32 queries; heads past the last are zero) stay in registers.
  const int nk = warp < kKSteps - 4 * kWarps ? 5 : 4;
  uint32_t qh[5][4], ql[5][4];
  frag::load_q_fragments<kLo, kWarps, kR, kP>(q_lat, q_pe, t * H + h0, hg, warp, nk, lane, qh, ql);

  float acc[8][4];  // O [16 heads, this warp's 64 latent columns 64 warp + 8 j + ...]
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
  // Softmax state of this warp's heads 2 warp + hh: the running max (warp-uniform) and this lane's share of
  // the running sum (its positions), summed over the lanes after the last tile.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  // Partial S [16, 32] of the tile `kt` over this warp's k-steps (the order of mla_tc_kernel). The K
  // fragments of k-step i + 1 are loaded before the MMAs of k-step i (ldmatrix latency off the chain).
  auto s_mma = [&](const __nv_bfloat16* kt, float(&s)[kNT / 8][4]) {
    uint32_t b[2][kNT / 16][4];  // [k-step parity][n-tile pair] K fragments
#pragma unroll
    for (int jp = 0; jp < kNT / 16; ++jp) frag::ldmatrix_bt(b[0][jp], kt, kLdK, jp * 16, 16 * warp, lane);
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      if (i + 1 < nk) {
#pragma unroll
        for (int jp = 0; jp < kNT / 16; ++jp)
          frag::ldmatrix_bt(b[(i + 1) % 2][jp], kt, kLdK, jp * 16, 16 * (warp + kWarps * (i + 1)), lane);
      }
      if (i < nk) {
#pragma unroll
        for (int jp = 0; jp < kNT / 16; ++jp) {
          const uint32_t* bb = b[i % 2][jp];
          mma_bf16(s[2 * jp], qh[i], bb);
          if (kLo) mma_bf16(s[2 * jp], ql[i], bb);
          mma_bf16(s[2 * jp + 1], qh[i], bb + 2);
          if (kLo) mma_bf16(s[2 * jp + 1], ql[i], bb + 2);
        }
      }
    }
  };
  // This warp's partial S to red[warp]. red is free: every warp read it (the last softmax) before the
  // barrier that preceded this tile's S.
  auto s_store = [&](const float(&s)[kNT / 8][4]) {
#pragma unroll
    for (int j = 0; j < kNT / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(&sm.red[warp][g][col]) = make_float2(s[j][0], s[j][1]);
      *reinterpret_cast<float2*>(&sm.red[warp][g + 8][col]) = make_float2(s[j][2], s[j][3]);
    }
  };
  // Online softmax of tile it: warp w updates heads 2w and 2w + 1 at position lane; S sums the warps'
  // partials in a fixed order. Both heads' max butterflies run interleaved.
  auto softmax = [&](int it) {
    const int j0 = begin + it * kNT;
    float s[2], mx[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = 2 * warp + hh;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += sm.red[w][h][lane];
      s[hh] = j0 + lane < end ? v * scale : -INFINITY;
      mx[hh] = s[hh];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], o));
      mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], o));
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = 2 * warp + hh;
      const float m_new = fmaxf(m_run[hh], mx[hh]);  // finite: position j0 < end
      const float corr = expf(m_run[hh] - m_new);    // 0 on the first tile
      const float p = s[hh] == -INFINITY ? 0.0f : expf(s[hh] - m_new);
      l_run[hh] = l_run[hh] * corr + p;
      m_run[hh] = m_new;
      const __nv_bfloat16 hi = __float2bfloat16_rn(p);
      sm.p_hi[h * kLdP + lane] = hi;
      if (kLo) sm.p_lo[h * kLdP + lane] = __float2bfloat16_rn(p - __bfloat162float(hi));
      if (lane == 0) sm.c[h] = corr;
    }
  };
  // O [16, 512] += P [16, 32] V [32, 512] of the tile `kt`: warp w owns latent columns [64w, 64w + 64).
  auto pv = [&](const __nv_bfloat16* kt) {
    const float c_lo = sm.c[g], c_hi = sm.c[g + 8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      acc[j][0] *= c_lo;
      acc[j][1] *= c_lo;
      acc[j][2] *= c_hi;
      acc[j][3] *= c_hi;
    }
#pragma unroll
    for (int k0 = 0; k0 < kNT; k0 += 16) {
      // Every fragment of this k-step first, then its 16 (32) MMAs.
      uint32_t ah[4], al[4] = {}, b[4][4];
      ldmatrix_a(ah, sm.p_hi, kLdP, 0, k0, lane);
      if (kLo) ldmatrix_a(al, sm.p_lo, kLdP, 0, k0, lane);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) frag::ldmatrix_v(b[jp], kt, kLdK, k0, warp * 64 + jp * 16, lane);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        mma_bf16(acc[2 * jp], ah, b[jp]);
        if (kLo) mma_bf16(acc[2 * jp], al, b[jp]);
        mma_bf16(acc[2 * jp + 1], ah, b[jp] + 2);
        if (kLo) mma_bf16(acc[2 * jp + 1], al, b[jp] + 2);
      }
    }
  };
  // Tile it's stage once its bytes have landed.
  auto wait_tile = [&](int it) -> const __nv_bfloat16* {
    tma::mbar_wait(smem_addr(&sm.full[it % KS]), static_cast<uint32_t>(it / KS) & 1u);
    return sm.k[it % KS];
  };
  // Tile it's scores are in red: barrier A (every warp is also done with tile it - 1: its stage, P and c),
  // warp 0 refills the stage of tile it - 1 with tile it + KS - 1 and reads the block table for the tile
  // after, the softmax, barrier B (P and c complete).
  auto scores_done = [&](int it) {
    __syncthreads();  // A
    if (warp == 0 && it + KS - 1 < ntiles) {
      fence_proxy_async();
      issue(it + KS - 1, sm.next[lane]);
      sm.next[lane] = it + KS < ntiles ? row_src(it + KS) : nullptr;
    }
    softmax(it);
    __syncthreads();  // B
  };

  if constexpr (KS >= 3) {
    // Software pipeline: the MMAs of S for tile it + 1 are issued before those of P V for tile it, so that
    // neither chain waits for the other's results; S's scores are stored after P V. Tile it + 1 was issued
    // KS - 2 tiles earlier.
    if (ntiles > 0) {
      float s[kNT / 8][4] = {};
      s_mma(wait_tile(0), s);
      s_store(s);
      scores_done(0);
    }
    for (int it = 0; it < ntiles; ++it) {
      const bool more = it + 1 < ntiles;
      float s[kNT / 8][4] = {};
      if (more) s_mma(wait_tile(it + 1), s);
      pv(sm.k[it % KS]);
      if (more) {
        s_store(s);
        scores_done(it + 1);
      }
    }
  } else {
    // Two stages: the pipeline above would hold both stages through S and P V and issue each tile only just
    // before it is needed. In order instead: tile it + 1 streams during the softmax and P V of tile it.
    for (int it = 0; it < ntiles; ++it) {
      float s[kNT / 8][4] = {};
      s_mma(wait_tile(it), s);
      s_store(s);
      scores_done(it);
      pv(sm.k[it % KS]);
    }
  }

  // The sums over the lanes (fixed butterfly), then the final state of each head in shared memory.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = l_run[hh];
    for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      sm.m[2 * warp + hh] = m_run[hh];
      sm.l[2 * warp + hh] = l;
    }
  }
  __syncthreads();  // sm.m and sm.l visible (an empty split: -inf and 0)

  // The partial state (or, unsplit, the output) and the fused merge: the merge's weights in sm.red (free
  // after the last tile; hg * splits <= kTcMergeFloats - 16, checked on the host), 1 / sums in sm.c.
  detail::mla_tc_finish(acc, sm.m, sm.l, out, ws_acc, ws_ml, arrivals, tl, t, H, kR, h0, hg, split, splits,
                        &sm.last, &sm.red[0][0][0], sm.c);
#endif
}

template <int KS, int kBlocks, bool kLo>
bool configure_instance() {
  auto* kernel = mla_tc_v2_kernel<KS, kBlocks, kLo>;
  bool ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(sizeof(SmemV2<KS>))) == cudaSuccess;
  if (ok)
    ok = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared) == cudaSuccess;
  if (!ok) cudaGetLastError();
  return ok;
}

// Stages of each instance: one block per SM takes the most that fit, two blocks two each.
constexpr int kStages1 = 5, kStages2 = 2;

}  // namespace

bool mla_tc_v2_supported() {
  // Bulk copies and mbarrier waits: the sm_90a cubin only. Configured once, outside any capture. False
  // without a GPU (a host-side split choice, as in the plan tests, never reaches the arch query).
  static const bool ok = device_available() && arch_path() == ArchPath::kHopper &&
                         configure_instance<kStages1, 1, true>() &&
                         configure_instance<kStages1, 1, false>() &&
                         configure_instance<kStages2, 2, true>() && configure_instance<kStages2, 2, false>();
  return ok;
}

void launch_attention_mla_tc_v2(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml,
                                int* arrivals, int64_t T, int64_t H, float scale, const MlaSplit& split) {
  const int64_t groups = (H + kHeads - 1) / kHeads;
  DSI_CHECK((split.v2_blocks == 1 || split.v2_blocks == 2) && split.tile_rows == kNT &&
                T * groups < (int64_t{1} << 31) && split.splits < 65536 && split.chunk % kNT == 0 &&
                mla_tc_v2_supported(),
            "attention_mla (tensor cores, v2): bad launch shape");
  const dim3 grid(static_cast<unsigned>(T * groups), static_cast<unsigned>(split.splits));
  auto launch = [&](auto kernel, size_t smem) {
    launch_pdl(kernel, grid, kThreads, smem, q_lat, q_pe, cache, plan, out, ws_acc, ws_ml, arrivals,
               static_cast<int>(H), scale, split.splits, split.chunk);
  };
  if (split.v2_blocks == 1)
    split.bf16_qp ? launch(mla_tc_v2_kernel<kStages1, 1, false>, sizeof(SmemV2<kStages1>))
                  : launch(mla_tc_v2_kernel<kStages1, 1, true>, sizeof(SmemV2<kStages1>));
  else
    split.bf16_qp ? launch(mla_tc_v2_kernel<kStages2, 2, false>, sizeof(SmemV2<kStages2>))
                  : launch(mla_tc_v2_kernel<kStages2, 2, true>, sizeof(SmemV2<kStages2>));
  check_launch("attention_mla (tensor cores, v2)");
}

}  // namespace dsinfer::cuda
