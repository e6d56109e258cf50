// Tensor-core MLA decode, third design (Hopper only): warpgroup MMAs, TMA tiles and warp specialisation. The
// blocks, split and partial states of mla_tc_kernels.cu (one block per (query token, split of its context,
// group of 16 heads), fused merge by the last split to arrive), computed on transposed products so that the
// 16 heads are the MMA's N and 64 cached positions its M (no padding of 16 heads to 64 rows):
//   S^T [64 positions, 32] = K [64, 576] [Q_hi; Q_lo]^T      (36 x wgmma m64n32k16, A K-major)
//   O^T [512, 32]         += V^T [512, 64] [P_hi; P_lo]^T    (8 M tiles x 4 k16 steps, A MN-major)
// Columns 0-15 of both are the heads' bf16 hi parts, 16-31 their lo parts (the fp32 queries and
// probabilities as bf16 hi + lo; there is no bf16-only variant): a head's value is the sum of its two
// columns, so only the cache's rounding remains. A 64-row tile (73,728 bytes) lands as 9 boxes of [64
// rows][64 values] in the 128-byte-swizzle layout (wgmma_common.cuh): box b is K's columns [64b, 64b + 64)
// for S and, for b < 8, V's latent columns [64b, 64b + 64) read MN-major for O. The work is split across
// warps:
//   - a producer warp (threads 256-287; one thread issues) requests each tile by TMA (a CUtensorMap of the
//     cache as [rows, 576] bf16, boxes of 64 values x min(block size, 64) rows) into one of two stages, on a
//     `full` mbarrier per stage (arrival + the tile's bytes), after the stage's `empty` mbarrier says its
//     previous tile is consumed; it reads the tile's block-table entries before that wait;
//   - warpgroup 0 computes S^T, the heads' tile maxima (shuffles, then shared memory across its 4 warps), the
//     online softmax (each thread keeps the running sum of its own positions, summed at the end), the
//     correction factors and P^T [32][64] (bf16 hi + lo) into one of two P buffers, then hands them over
//     (named barrier P_full[b]) and goes on to the next tile's S;
//   - warpgroup 1 holds O^T [512, 32] (8 M tiles x 16 registers), rescales it by the corrections where a
//     maximum moved, runs O^T += V^T [P_hi; P_lo]^T (32 wgmma) and frees P (P_empty[b]) and the stage
//     (DSINFER_MLA_WG_SPLIT_O=1: warpgroup 0 runs half of O after handing P over; measured no faster).
// So S of tile k + 1 overlaps O of tile k, and up to two tiles (147,456 bytes) are in flight per SM. The
// barriers are initialised and the tensor map's descriptor fetched before the wait for the kernels before.
// Rows of the last tile past the split's end (possibly not requested at all, or from another sequence's
// slots) are zeroed in boxes 0-7 by warpgroup 0 before O reads them (their scores are masked to -inf).
//
// Early tiles (MlaPlanView::early_rows, DSINFER_MLA_EARLY_TILES): in a decode-only step staged before its
// first kernel, the block's work and its first two tiles are requested before the wait. The plan and the
// rows of earlier steps are complete by then: the kernel just before (mla_prepare, or head_matmul's W_UK
// kernels) triggers only after its own wait, so the one before it has ended, and a kernel ends only after its
// own wait, so every earlier one has too. The token's own row, which the kernel just before writes, is
// loaded again after the wait and stored over the early copy.
//
// While GEMV stamps are on (gemv_stamps.h) the launch runs the STAMPS instance (same bits), whose CTAs record
// their timeline (mla_wgmma_tma_kernel's comment; scripts/mla_stamp_phases.py reads it).
//
// Shared memory (1024-byte aligned base): stages [2][73,728], queries [9 boxes][32 rows][128 bytes], P
// [2][4,096], maxima [2][4 warps][16], corrections [2][16], sums [4][16], final maxima and sums [2][16], a
// flag and the four mbarriers: ~190 KiB, one block per SM. After the last tile stage 0 holds the staged
// outputs and stage 1 the fused merge's weights.
//
// Measured on the H200 (docs/benchmarks.md, tenth session), batch 64 x 4096 x 16 heads: 84.8-87.7 us per
// kernel (ncu), 82% of the copy bandwidth; 90.1-90.6 us per call replayed back to back in a CUDA graph (79%;
// the second design 104.3, this design's earlier cp.async instances 101.7); 128 heads 502 us (667).
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_tc_block.cuh"
#include "backend/cuda/mla_wgmma_block.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/tensor_map_encoder.h"
#include "backend/cuda/tma_common.cuh"
#include "backend/cuda/wgmma_common.cuh"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using namespace wgmma;
using namespace mla_wg;

constexpr int kThreads = 288;                // warpgroup 0 (S, softmax), warpgroup 1 (O), the producer warp
constexpr uint32_t kQOff = 2 * kTileBytes;   // 147,456
constexpr uint32_t kPOff = kQOff + kQBytes;  // 184,320: P [2 buffers][32][64] bf16, swizzled
constexpr uint32_t kRedOff = kPOff + 2 * kPBytes;     // float [2 buffers][4 warps][16 heads] tile maxima
constexpr uint32_t kCorrOff = kRedOff + 2 * 4 * 64;   // float [2 buffers][16] O corrections
constexpr uint32_t kSumOff = kCorrOff + 2 * 64;       // float [4 warps][16] running sums
constexpr uint32_t kMlOff = kSumOff + 4 * 64;         // float [16] maxima, [16] sums
constexpr uint32_t kFlagOff = kMlOff + 2 * 64;        // int: mla_arrive_last's verdict
constexpr uint32_t kBarOff = kFlagOff + 16;           // uint64 full[2], empty[2]
constexpr uint32_t kSmemBytes = kBarOff + 32 + 1024;  // + slack to align the base to 1024 bytes
static_assert(kOsBytes <= kTileBytes && kTcMergeFloats * 4 <= kTileBytes, "epilogue buffers fit a stage");
static_assert(kSmemBytes <= 227 * 1024, "one block per SM");

// Named barriers (0 is __syncthreads).
constexpr int kBarWg0 = 1;        // warpgroup 0's 128 threads
constexpr int kBarConsumers = 2;  // both warpgroups (256): the queries are staged
constexpr int kBarPFull = 3;      // + buffer: P and the corrections written (warpgroup 0 arrives, 1 waits)
constexpr int kBarPEmpty = 5;     // + buffer: O has read P (warpgroup 1 arrives, 0 waits)

// O^T latent rows [64 mb0, 64 (mb0 + kMb)) (o[mb - mb0]) rescaled by this thread's heads' corrections
// corr[jh][e] where a maximum moved, then += V^T [P_hi; P_lo]^T for the tile in `stage` with P at p_s.
template <int kMb>
__device__ __forceinline__ void o_step(float (&o)[kMb][16], int mb0, uint32_t stage, uint32_t p_s,
                                       const float (&corr)[2][2]) {
  bool rescale = false;
#pragma unroll
  for (int jh = 0; jh < 2; ++jh)
#pragma unroll
    for (int e = 0; e < 2; ++e) rescale |= corr[jh][e] != 1.0f;
  // The corrections are the same in every warp: one test per warp, most tiles after the first few skip it.
  if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
      for (int i = 0; i < 16; ++i) o[mb][i] *= corr[(i / 4) % 2][i % 2];
  }
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int i = 0; i < 16; ++i) fence_operand(o[mb][i]);
  wgmma_fence();
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk)
      wgmma_m64n32k16<1>(o[mb], smem_desc_mn(stage + (mb0 + mb) * kBoxBytes + kk * 2048, kBoxBytes),
                         smem_desc(p_s + 32 * kk));
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int i = 0; i < 16; ++i) fence_operand(o[mb][i]);
}

// Stages o (latent rows from 64 mb0) as hi + lo columns into o_s [16 heads][kLdO].
template <int kMb>
__device__ __forceinline__ void stage_o(const float (&o)[kMb][16], int mb0, float* o_s, int warp, int g,
                                        int tq) {
#pragma unroll
  for (int jh = 0; jh < 2; ++jh)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = 8 * jh + 2 * tq + e;
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = 64 * (mb0 + mb) + 16 * warp + g + 8 * half;
          o_s[h * kLdO + r] = o[mb][4 * jh + 2 * half + e] + o[mb][4 * (jh + 2) + 2 * half + e];
        }
    }
}

// kSplitO: warpgroup 0 also runs O for latent rows 0-255 (warpgroup 1: 256-511) after handing P over;
// else warpgroup 1 runs all of O. STAMPS: the block records its timeline into `stamps` (gemv_stamps.h's
// slot of this launch, one "block" per CTA, index blockIdx.x + gridDim.x blockIdx.y): start (thread 0 at
// entry), issued (the producer, its early tiles requested), waited (thread 0, the PDL wait returned), staged
// (thread 0, both warpgroups past the staged queries), O done (thread 128, warpgroup 1's last O MMAs waited
// for) and end (thread 0, the outputs written); then its SM and its tile count. The same bits.
template <bool kSplitO, bool STAMPS>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wgmma_tma_kernel(const __grid_constant__ CUtensorMap map, const uint16_t* cache, const float* q_lat,
                         const float* q_pe, MlaPlanView plan, float* out, float* ws_acc, float* ws_ml,
                         int* arrivals, int H, float scale, int splits, int64_t chunk, int box_rows,
                         uint64_t* stamps) {
  // Field `field` of this CTA's stamps (by the calling thread; STAMPS instances only).
  auto put = [&](int field, uint64_t value) {
    if constexpr (STAMPS) {
      const int64_t cta = blockIdx.x + static_cast<int64_t>(gridDim.x) * blockIdx.y;
      stamps[cta * kGemvStampFields + field] = value;
    }
  };
  // The GPU's global clock into point `point`, by thread `who` only.
  auto st = [&](int point, int who) {
    if constexpr (STAMPS) {
      if (static_cast<int>(threadIdx.x) == who) {
        uint64_t now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        put(point, now);
      }
    }
  };
  st(kStampStart, 0);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms: 1024-byte aligned
  unsigned char* const gbase = smem_raw + (base - raw);
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, warp = wt / 32, lane = tid % 32;
  const int g = lane >> 2, tq = lane & 3;
  auto full_bar = [&](int s) { return base + kBarOff + 8u * s; };
  auto empty_bar = [&](int s) { return base + kBarOff + 16u + 8u * s; };
  // Before the wait for the kernels before (nothing here reads global memory they write): the barriers and
  // the tensor map's descriptor fetch.
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      tma::mbar_init(full_bar(s), 1);                 // the producer's arrival (+ the tile's bytes)
      tma::mbar_init(empty_bar(s), kSplitO ? 8 : 4);  // one arrival per warp that runs O
    }
    tma::mbar_init_fence();
    fence_proxy_async();  // and to the async proxy (the TMA unit), as in the first run's build
  }
  if (tid == 256) tma::prefetch_map(&map);
  __syncthreads();  // the barriers are initialised

  // Producer: tile k into stage k % 2 once warpgroup 1 has freed it (its tile k - 2).
  auto request_tile = [&](const detail::MlaTcBlock& work, int k) {
    const int s = k & 1;
    const int p0 = work.begin + k * kRows;
    const int subs = (min(kRows, work.end - p0) + box_rows - 1) / box_rows;  // boxes of rows requested
    // The tile's cache rows, read before the wait for its stage so that the block table's latency is not
    // between the stage freeing and the requests (a build that read it once per box ran 102.6 us against
    // 90.4 at batch 64 x 4096).
    int rows[kRows / 8];
#pragma unroll
    for (int sb = 0; sb < kRows / 8; ++sb) {
      const int pos = p0 + sb * box_rows;
      rows[sb] = sb < subs ? work.blocks[pos / work.bs] * work.bs + pos % work.bs : 0;
    }
    if (k >= 2) tma::mbar_wait(empty_bar(s), ((k >> 1) - 1) & 1);
    tma::mbar_arrive_expect_tx(full_bar(s), static_cast<uint32_t>(subs * box_rows * 128 * kBoxes));
    const uint32_t stage = base + static_cast<uint32_t>(s) * kTileBytes;
#pragma unroll
    for (int sb = 0; sb < kRows / 8; ++sb) {
      if (sb < subs) {
#pragma unroll
        for (int j = 0; j < kBoxes; ++j)
          tma::load_2d(stage + j * kBoxBytes + static_cast<uint32_t>(sb * box_rows) * 128, &map, j * 64,
                       rows[sb], full_bar(s));
      }
    }
  };
  // plan.early_rows (one query token per sequence, the plan uploaded before the step's first kernel): the
  // plan and the cache rows of earlier steps are read before the wait, so the first two tiles are requested
  // there; the token's own row (position `newest`, written by the kernel before) may land stale and is
  // loaded again after the wait and written over the staged copy (warpgroup 0, before its scores).
  const bool early = plan.early_rows;
  detail::MlaTcBlock work{};
  if (early) work = detail::mla_tc_block(plan, H, kHeads, chunk);
  const int pre_tiles = early ? min(2, (work.end - work.begin + kRows - 1) / kRows) : 0;
  if (wg == 2 && lane == 0)
    for (int k = 0; k < pre_tiles; ++k) request_tile(work, k);
  st(kStampIssued, 256);
  pdl_wait();  // the cache row of this step and the queries come from the kernels before
  pdl_trigger();
  st(kStampWaited, 0);
  if (!early) work = detail::mla_tc_block(plan, H, kHeads, chunk);
  const int64_t tl = work.tl, t = work.t;
  const int h0 = work.h0, hg = work.hg, begin = work.begin, end = work.end;
  const int ntiles = (end - begin + kRows - 1) / kRows;
  float* const red_max = reinterpret_cast<float*>(gbase + kRedOff);  // [2][4][16]
  float* const corr_s = reinterpret_cast<float*>(gbase + kCorrOff);  // [2][16]
  float* const red_sum = reinterpret_cast<float*>(gbase + kSumOff);  // [4][16]
  float* const ml_s = reinterpret_cast<float*>(gbase + kMlOff);      // [16] max, [16] sum
  // The newest row's tile among those requested before the wait (-1: none), its row in the tile and this
  // thread's 16-byte piece of it (warpgroup 0's threads 0-71: 72 pieces of 576 bf16 values).
  const int newest = early ? plan.positions[t] : -1;
  const int fix_tile = early && newest >= begin && newest < end && (newest - begin) / kRows < pre_tiles
                           ? (newest - begin) / kRows
                           : -1;
  const int fix_row = newest - begin - fix_tile * kRows;
  uint4 fix_piece = make_uint4(0, 0, 0, 0);
  if (fix_tile >= 0 && wg == 0 && wt < kBoxes * 8) {
    const int64_t slot = static_cast<int64_t>(work.blocks[newest / work.bs]) * work.bs + newest % work.bs;
    fix_piece = __ldcg(reinterpret_cast<const uint4*>(cache + slot * kD) + wt);
  }

  if (wg == 2) {
    if (lane == 0)
      for (int k = pre_tiles; k < ntiles; ++k) request_tile(work, k);
    __syncwarp();
  } else {
    stage_queries(gbase + kQOff, q_lat, q_pe, t, H, h0, hg, tid, 256);
    fence_proxy_async();  // the queries (generic writes) before the MMAs (async proxy) read them
    tma::bar_sync(kBarConsumers, 256);
    st(kStampConsumed, 0);
  }

  if (wg == 0) {
    // S and the online softmax. This thread's heads: 2 tq + e + 8 jh (jh, e in {0, 1}); its positions 16 warp
    // + g + 8 half of a tile. S register of (jh, half, e): hi part 4 jh + 2 half + e, lo part 4 (jh + 2) + 2
    // half + e.
    float m_run[2][2], l_run[2][2];  // [jh][e]
#pragma unroll
    for (int jh = 0; jh < 2; ++jh)
#pragma unroll
      for (int e = 0; e < 2; ++e) m_run[jh][e] = -INFINITY, l_run[jh][e] = 0.0f;
    float o[kSplitO ? 4 : 1][16];  // kSplitO: O^T latent rows 0-255
#pragma unroll
    for (int mb = 0; mb < (kSplitO ? 4 : 1); ++mb)
#pragma unroll
      for (int i = 0; i < 16; ++i) o[mb][i] = 0.0f;
    for (int k = 0; k < ntiles; ++k) {
      const int b = k & 1;
      const uint32_t stage = base + static_cast<uint32_t>(b) * kTileBytes;
      tma::mbar_wait(full_bar(b), (k >> 1) & 1);
      if (k == fix_tile) {  // the newest row as the kernel before wrote it, over the copy requested early
        if (wt < kBoxes * 8)
          *reinterpret_cast<uint4*>(gbase + b * kTileBytes + (wt / 8) * kBoxBytes +
                                    swizzled128(fix_row, wt % 8)) = fix_piece;
        fence_proxy_async();          // before the MMAs (async proxy) of both warpgroups read the stage
        tma::bar_sync(kBarWg0, 128);  // warpgroup 1 reads it after P_full, which follows this
      }
      float s[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) s[i] = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) fence_operand(s[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wgmma_m64n32k16<0>(s, smem_desc(stage + (kk / 4) * kBoxBytes + 32 * (kk % 4)),
                           smem_desc(base + kQOff + (kk / 4) * kQBoxBytes + 32 * (kk % 4)));
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 16; ++i) fence_operand(s[i]);

      // Scores and the heads' maxima over this warp's 16 positions, then over the warpgroup's 4 warps.
      const int j0 = begin + k * kRows;
      float* const rmax = red_max + b * 4 * kHeads;
      float sc[2][2][2];  // [jh][e][half]
#pragma unroll
      for (int jh = 0; jh < 2; ++jh)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int pos = j0 + 16 * warp + g + 8 * half;
            const float v = (s[4 * jh + 2 * half + e] + s[4 * (jh + 2) + 2 * half + e]) * scale;
            sc[jh][e][half] = pos < end ? v : -INFINITY;
          }
          float m = fmaxf(sc[jh][e][0], sc[jh][e][1]);
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
          if (g == 0) rmax[warp * kHeads + 8 * jh + 2 * tq + e] = m;
        }
      tma::bar_sync(kBarWg0, 128);  // the maxima (double-buffered: tile k + 2 rewrites them after this)
      if (k >= 2) tma::bar_sync(kBarPEmpty + b, 256);  // warpgroup 1's O of tile k - 2 has read P[b]
      unsigned char* const p_g = gbase + kPOff + b * kPBytes;
      float corr_r[2][2];
#pragma unroll
      for (int jh = 0; jh < 2; ++jh)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int h = 8 * jh + 2 * tq + e;
          float m = rmax[h];
#pragma unroll
          for (int w = 1; w < 4; ++w) m = fmaxf(m, rmax[w * kHeads + h]);
          const float m_new = fmaxf(m_run[jh][e], m);     // finite: position j0 < end
          const float corr = expf(m_run[jh][e] - m_new);  // 0 on the first tile
          corr_r[jh][e] = corr;
          if (warp == 0 && g == 0) corr_s[b * kHeads + h] = corr;
          m_run[jh][e] = m_new;
          float l = l_run[jh][e] * corr;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float p = sc[jh][e][half] == -INFINITY ? 0.0f : expf(sc[jh][e][half] - m_new);
            l += p;
            // P^T as B [k = position][n = head (hi) or 16 + head (lo)], K-major: row n, byte 2 * position.
            const int r = 16 * warp + g + 8 * half;
            const __nv_bfloat16 ph = __float2bfloat16_rn(p);
            const __nv_bfloat16 pl = __float2bfloat16_rn(p - __bfloat162float(ph));
            *reinterpret_cast<__nv_bfloat16*>(p_g + swizzled128(h, r >> 3) + 2 * (r & 7)) = ph;
            *reinterpret_cast<__nv_bfloat16*>(p_g + swizzled128(kHeads + h, r >> 3) + 2 * (r & 7)) = pl;
          }
          l_run[jh][e] = l;
        }
      // Rows past the end (the last tile only): zero the value boxes so that O's products with p = 0 stay 0.
      const int valid = end - j0;
      if (valid < kRows) {
        for (int idx = wt; idx < (kRows - valid) * 8 * (kBoxes - 1); idx += 128) {
          const int c = idx % 8, j = (idx / 8) % (kBoxes - 1), r = valid + idx / (8 * (kBoxes - 1));
          *reinterpret_cast<uint4*>(gbase + b * kTileBytes + j * kBoxBytes + r * 128 + c * 16) =
              make_uint4(0, 0, 0, 0);
        }
      }
      fence_proxy_async();  // P and the zeroed rows (generic writes) before the O MMAs read them
      tma::bar_arrive(kBarPFull + b, 256);
      if constexpr (kSplitO) {
        o_step<4>(o, 0, stage, base + kPOff + b * kPBytes, corr_r);
        if (k + 2 < ntiles) {
          __syncwarp();
          if (lane == 0) tma::mbar_arrive(empty_bar(b));
        }
      }
    }

    // The heads' sums over this warp's positions (lanes of one tq), per warp; the final maxima.
#pragma unroll
    for (int jh = 0; jh < 2; ++jh)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float l = l_run[jh][e];
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        l += __shfl_xor_sync(0xffffffffu, l, 16);
        const int h = 8 * jh + 2 * tq + e;
        if (g == 0) red_sum[warp * kHeads + h] = l;
        if (g == 0 && warp == 0) ml_s[h] = m_run[jh][e];
      }
    // Both warpgroups are past their last MMAs before stage 0 takes the staged outputs.
    tma::bar_sync(kBarConsumers, 256);
    if constexpr (kSplitO) stage_o<4>(o, 0, reinterpret_cast<float*>(gbase), warp, g, tq);
  } else if (wg == 1) {
    // O^T [512 latent, 32] (kSplitO: rows 256-511): M tile mb, register i (column 8 (i / 4) + 2 tq + i % 2:
    // head 8 ((i / 4) % 2) + 2 tq + i % 2, hi part for i < 8, lo part after).
    constexpr int kMb = kSplitO ? 4 : 8, kMb0 = kSplitO ? 4 : 0;
    float o[kMb][16];
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
      for (int i = 0; i < 16; ++i) o[mb][i] = 0.0f;
    for (int k = 0; k < ntiles; ++k) {
      const int b = k & 1;
      tma::bar_sync(kBarPFull + b, 256);
      float corr[2][2];  // [jh][e]
#pragma unroll
      for (int jh = 0; jh < 2; ++jh)
#pragma unroll
        for (int e = 0; e < 2; ++e) corr[jh][e] = corr_s[b * kHeads + 8 * jh + 2 * tq + e];
      o_step<kMb>(o, kMb0, base + static_cast<uint32_t>(b) * kTileBytes, base + kPOff + b * kPBytes, corr);
      if (k + 2 < ntiles) {  // tile k + 2 reuses P[b] and the stage: free both
        tma::bar_arrive(kBarPEmpty + b, 256);
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(empty_bar(b));
      }
    }
    st(kStampLastIssue, 128);
    // O = hi + lo columns, staged as [16 heads][512 (+4)] floats in stage 0 (every tile has been consumed).
    tma::bar_sync(kBarConsumers, 256);
    stage_o<kMb>(o, kMb0, reinterpret_cast<float*>(gbase), warp, g, tq);
  }
  __syncthreads();  // staged outputs, per-warp sums and maxima complete
  if (tid < kHeads) {
    float l = 0.0f;
#pragma unroll
    for (int v = 0; v < 4; ++v) l += red_sum[v * kHeads + tid];
    ml_s[kHeads + tid] = l;
  }
  __syncthreads();
  write_outputs(reinterpret_cast<const float*>(gbase), ml_s, out, ws_acc, ws_ml, arrivals, tl, t, H, h0, hg,
                work.split, splits, reinterpret_cast<float*>(gbase + kTileBytes) /* stage 1 */,
                reinterpret_cast<int*>(gbase + kFlagOff));
  st(kStampEnd, 0);
  if constexpr (STAMPS) {
    if (tid == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      put(kStampFieldSm, sm);
      put(kStampFieldTiles, static_cast<uint64_t>(ntiles));
    }
  }
}

template <bool kSplitO, bool STAMPS>
bool configure_instance() {
  const bool set =
      cudaFuncSetAttribute(mla_wgmma_tma_kernel<kSplitO, STAMPS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmemBytes)) == cudaSuccess;
  if (!set) cudaGetLastError();
  return set;
}

bool configured() {
  static const bool ok = configure_instance<false, false>() && configure_instance<true, false>() &&
                         configure_instance<false, true>() && configure_instance<true, true>();
  return ok;
}

// DSINFER_MLA_WG_SPLIT_O (read once): 1 has warpgroup 0 run half of O too, 0 (default) leaves O to
// warpgroup 1. Measured on the H200 (batch 64 x 4096): 16 heads 90.4 vs 90.6 us, 128 heads 547.6 vs 503.2.
bool split_o() {
  static const bool split = env_int("DSINFER_MLA_WG_SPLIT_O", 0, 0, 1) == 1;
  return split;
}

// Rows per TMA box: a whole 64-row tile inside one cache block, or one block of a smaller size.
int box_rows_for(int64_t block_size) {
  return static_cast<int>(std::min<int64_t>(block_size, kRows));
}

// DSINFER_MLA_EARLY_TILES (read once; mla_set_early_tiles overrides).
bool& early_tiles_setting() {
  static bool on = env_int("DSINFER_MLA_EARLY_TILES", 1, 0, 1) == 1;
  return on;
}

}  // namespace

bool mla_early_tiles() {
  return early_tiles_setting();
}

void mla_set_early_tiles(bool on) {
  early_tiles_setting() = on;
}

bool mla_wgmma_supported() {
  // wgmma: the sm_90a cubin only. Configured once, outside any capture; false without a GPU.
  static const bool ok = device_available() && arch_path() == ArchPath::kHopper && configured();
  return ok;
}

bool mla_wgmma_tma_usable(const MlaPlanView& plan, uintptr_t cache) {
  const int64_t bs = plan.block_size;
  const bool shape = bs >= 8 && bs % 8 == 0 && (bs % kRows == 0 || kRows % bs == 0) && plan.cache_rows > 0 &&
                     plan.cache_rows < (int64_t{1} << 31) && cache % 16 == 0;
  return shape && mla_wgmma_supported() && tensor_map_encoder() != nullptr;
}

void launch_attention_mla_wgmma_tma(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                    const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml,
                                    int* arrivals, int64_t T, int64_t H, float scale, const MlaSplit& split) {
  const int64_t groups = (H + kHeads - 1) / kHeads;
  DSI_CHECK(split.wgmma && split.tile_rows == kRows && T * groups < (int64_t{1} << 31) &&
                split.splits < 65536 && split.chunk % kRows == 0 &&
                mla_wgmma_tma_usable(plan, reinterpret_cast<uintptr_t>(cache)),
            "attention_mla (tensor cores, wgmma + TMA): bad launch shape");
  // The cache as a [rows, 576] bf16 matrix; boxes of 64 values (128 bytes, the swizzle span) x box rows.
  const int box_rows = box_rows_for(plan.block_size);
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(plan.cache_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kD) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult made = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(cache), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DSI_CHECK(made == CUDA_SUCCESS, "attention_mla (wgmma + TMA): cuTensorMapEncodeTiled failed (", made, ")");
  const dim3 grid(static_cast<unsigned>(T * groups), static_cast<unsigned>(split.splits));
  // With GEMV stamps on (gemv_stamps.h) the launch takes a stamp slot as a launch of T rows, K = 576 and 0
  // tiles, and runs the STAMPS instance.
  uint64_t* stamps = next_gemv_stamp_slot(T, kD, false, static_cast<int64_t>(grid.x) * grid.y, 0);
  auto kernel = split_o() ? (stamps ? mla_wgmma_tma_kernel<true, true> : mla_wgmma_tma_kernel<true, false>)
                          : (stamps ? mla_wgmma_tma_kernel<false, true> : mla_wgmma_tma_kernel<false, false>);
  launch_pdl(kernel, grid, kThreads, kSmemBytes, map, cache, q_lat, q_pe, plan, out, ws_acc, ws_ml, arrivals,
             static_cast<int>(H), scale, split.splits, split.chunk, box_rows, stamps);
  check_launch("attention_mla (tensor cores, wgmma + TMA)");
}

}  // namespace dsinfer::cuda
