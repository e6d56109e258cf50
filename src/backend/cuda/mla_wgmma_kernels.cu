// Tensor-core MLA decode, third design (Hopper only; opt-in: DSINFER_MLA_KERNEL=wg): the blocks, split and
// partial states of mla_tc_kernels.cu (one block per (query token, split of its context, group of 16 heads),
// fused merge by the last split to arrive), computed with warpgroup MMAs on transposed products so that the
// 16 heads are the MMA's N and the cached positions its M (no padding of 16 heads to 64 rows):
//   S^T [64 positions, 32] = K [64, 576] [Q_hi; Q_lo]^T      (36 x wgmma m64n32k16, A K-major)
//   O^T [512, 32]         += V^T [512, 64] [P_hi; P_lo]^T    (8 M tiles x 4 k16 steps, A MN-major)
// Columns 0-15 of both are the heads' bf16 hi parts, 16-31 their lo parts (the fp32 queries and
// probabilities as bf16 hi + lo, the other designs' default precision; there is no bf16-only variant): a
// head's value is the sum of its two columns, so only the cache's rounding remains.
//
// Each 64-row tile of cached rows (73,728 bytes) arrives by 16-byte cp.async copies (rows past the split's
// end zero-filled) into the 128-byte-swizzle layout (wgmma_common.cuh) as 9 boxes of [64 rows][64 values]:
// box b is K's columns [64b, 64b + 64) for S and, for b < 8, V's latent columns [64b, 64b + 64) read MN-major
// for O. Per tile: S (one wgmma group), the heads' tile maxima over the 64 positions (shuffles within a warp,
// shared memory across the warpgroup's 4 warps), the online softmax (each thread keeps the running sum of its
// own positions, summed at the end), P as bf16 hi + lo into shared memory (the B operand of O), O rescaled in
// registers only when some head's maximum moved, and the O group.
//
// Two instances (DSINFER_MLA_WG_GROUPS, default 2): one consumer warpgroup per block streaming tile it + 1
// into the second stage while it computes tile it; or two warpgroups (256 threads) that each own one stage
// and take alternate tiles with their own softmax state, merged at the end like splits (one warpgroup's MMAs
// and softmax run while the other waits for its tile). One block per SM either way: two stages of 73,728 B +
// 36,864 B of queries ([32][576] bf16, swizzled like the tiles) + 4,096 B of P per warpgroup + reductions
// (~190 KiB); after the last tile stage 0 holds the staged outputs ([16][512 + 4] floats per warpgroup) and
// stage 1 the fused merge's weights.
//
// Measured on the H200 (docs/benchmarks.md, 2026-12-01): batch 64 x 4096 x 16 heads 101.5 us (70% of copy;
// the second design 103.6), x 128 heads 618 us (670); batch 256 x 256 46.5 us (35.4). ncu on the one-
// warpgroup instance: one warp per scheduler issuing every 3.6 cycles, DRAM 62%: with one 73,728-byte tile in
// flight per SM the loads' latency is exposed; two stages is what shared memory holds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_tc_block.cuh"
#include "backend/cuda/mla_wgmma_block.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wgmma_common.cuh"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using namespace wgmma;

using namespace mla_wg;

constexpr int kStages = 2;
constexpr uint32_t kQOff = kStages * kTileBytes;  // 147,456
constexpr uint32_t kPOff = kQOff + kQBytes;       // 184,320: per warpgroup P [32][64] bf16, swizzled

// Shared-memory layout of the instance with kWGs consumer warpgroups (1 or 2).
template <int kWGs>
struct WgLayout {
  static constexpr int kThreads = 128 * kWGs;
  static constexpr uint32_t kRedOff = kPOff + kWGs * kPBytes;   // float [wg][4 warps][16 heads] maxima
  static constexpr uint32_t kSumOff = kRedOff + kWGs * 256;     // float [wg][4][16] running sums
  static constexpr uint32_t kMaxOff = kSumOff + kWGs * 256;     // float [wg][16] final maxima
  static constexpr uint32_t kFlagOff = kMaxOff + kWGs * 64;     // int: mla_arrive_last's verdict
  static constexpr uint32_t kSmemBytes = kFlagOff + 16 + 1024;  // + slack to align the base to 1024 bytes
  static_assert(kWGs * kOsBytes <= kTileBytes, "the staged outputs fit stage 0");
  static_assert(kTcMergeFloats * 4 <= kTileBytes, "the fused merge's weights fit stage 1");
  static_assert(kSmemBytes <= 227 * 1024, "one block per SM");
  static_assert(kStages % kWGs == 0, "whole stages per warpgroup");
};
// Barrier of the 128 threads of warpgroup wg (named barrier 1 + wg).
__device__ __forceinline__ void wg_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

// kWGs consumer warpgroups: warpgroup wg takes the tiles it = wg (mod kWGs) with its own online softmax, O
// and P; the warpgroups' states merge at the end like splits. One warpgroup: tile it + 1 streams into the
// other stage while tile it is computed; two: each owns a stage and loads its next tile after its last MMAs,
// while the other warpgroup computes.
template <int kWGs>
__global__ void __launch_bounds__(WgLayout<kWGs>::kThreads, 1)
    mla_wgmma_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan,
                     float* out, float* ws_acc, float* ws_ml, int* arrivals, int H, float scale, int splits,
                     int64_t chunk) {
  using L = WgLayout<kWGs>;
  constexpr int kSt = kStages / kWGs;  // stages per warpgroup
  // Built for every target; the wgmma instructions trap outside the sm_90a cubin (never launched there).
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms: 1024-byte aligned
  unsigned char* const gbase = smem_raw + (base - raw);

  const detail::MlaTcBlock work = detail::mla_tc_block(plan, H, kHeads, chunk);
  const int64_t tl = work.tl, t = work.t;
  const int h0 = work.h0, hg = work.hg, split = work.split, begin = work.begin, end = work.end, bs = work.bs;
  const int32_t* blocks = work.blocks;
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, warp = wt / 32, lane = tid % 32;
  const int g = lane >> 2, tq = lane & 3;
  const int ntiles = (end - begin + kRows - 1) / kRows;
  float* const red_max = reinterpret_cast<float*>(gbase + L::kRedOff) + wg * 4 * kHeads;  // [4][16]
  float* const red_sum = reinterpret_cast<float*>(gbase + L::kSumOff);                    // [wg][4][16]
  float* const m_fin = reinterpret_cast<float*>(gbase + L::kMaxOff);                      // [wg][16]
  unsigned char* const p_g = gbase + kPOff + wg * kPBytes;
  const uint32_t p_s = base + kPOff + wg * kPBytes;

  // This warpgroup's k-th tile (it = k kWGs + wg) into its stage k % kSt: thread wt copies chunk c0 + 8j
  // (box j) of rows r0 + 16i.
  const int c0 = wt & 7, r0 = wt >> 3;
  const uint32_t dst0 = swizzled128(r0, c0);  // r0 + 16i has the same row % 8
  auto stage_of = [&](int k) { return base + static_cast<uint32_t>(wg * kSt + k % kSt) * kTileBytes; };
  auto issue = [&](int k) {
    const uint32_t stage = stage_of(k);
    const int it = k * kWGs + wg;
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      const int pos = begin + it * kRows + r0 + 16 * i;
      const bool valid = pos < end;
      const uint16_t* src =
          valid ? cache + (static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs) * kD + c0 * 8 : cache;
#pragma unroll
      for (int j = 0; j < kBoxes; ++j)
        copy_async16(stage + j * kBoxBytes + dst0 + 16 * i * 128, src + (valid ? j * 64 : 0), valid);
    }
  };
  if (wg < ntiles) issue(0);
  copy_async_commit();

  // The queries: row h (hi) and 16 + h (lo) of each box, heads past hg zero.
  stage_queries(gbase + kQOff, q_lat, q_pe, t, H, h0, hg, tid, L::kThreads);
  fence_proxy_async();  // the queries (generic writes) before the MMAs (async proxy) read them
  __syncthreads();

  // This thread's heads: 2 tq + e + 8 jh (jh, e in {0, 1}); its positions 16 warp + g + 8 half of a tile.
  // Accumulator register of (jh, half, e): hi part 4 jh + 2 half + e, lo part 4 (jh + 2) + 2 half + e.
  float o[kR / 64][16];  // O^T [512 latent, 32]: M tile mb, register i
#pragma unroll
  for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
    for (int i = 0; i < 16; ++i) o[mb][i] = 0.0f;
  float m_run[2][2], l_run[2][2];  // [jh][e]
#pragma unroll
  for (int jh = 0; jh < 2; ++jh)
#pragma unroll
    for (int e = 0; e < 2; ++e) m_run[jh][e] = -INFINITY, l_run[jh][e] = 0.0f;

  for (int k = 0; k * kWGs + wg < ntiles; ++k) {
    const int it = k * kWGs + wg;
    // Every warp of this warpgroup is past the MMAs of its tile k - 1 (whose stage is refilled below).
    wg_sync(wg);
    if constexpr (kSt == 2) {
      if (it + kWGs < ntiles) issue(k + 1);
      copy_async_commit();
      copy_async_wait<1>();  // this thread's copies of tile it landed
    } else {
      if (k > 0) issue(k);
      copy_async_commit();
      copy_async_wait<0>();
    }
    fence_proxy_async();  // ... visible to the async proxy
    wg_sync(wg);          // every thread's
    const uint32_t stage = stage_of(k);

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
    const int j0 = begin + it * kRows;
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
        if (g == 0) red_max[warp * kHeads + 8 * jh + 2 * tq + e] = m;
      }
    wg_sync(wg);
    float corr[2][2];
    bool rescale = false;
#pragma unroll
    for (int jh = 0; jh < 2; ++jh)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = 8 * jh + 2 * tq + e;
        float m = red_max[h];
#pragma unroll
        for (int w = 1; w < 4; ++w) m = fmaxf(m, red_max[w * kHeads + h]);
        const float m_new = fmaxf(m_run[jh][e], m);  // finite: position j0 < end
        corr[jh][e] = expf(m_run[jh][e] - m_new);    // 0 on the first tile
        rescale |= corr[jh][e] != 1.0f;
        m_run[jh][e] = m_new;
        float l = l_run[jh][e] * corr[jh][e];
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
    fence_proxy_async();  // P (generic writes) before the MMAs read it
    wg_sync(wg);          // the warpgroup's P; its red_max reads are done before the next tile rewrites it

    // O is rescaled only where some head's maximum moved (the corrections are the same in every warp: one
    // test per warp, most tiles after the first few skip it).
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
        for (int i = 0; i < 16; ++i) o[mb][i] *= corr[(i / 4) % 2][i % 2];
    }
#pragma unroll
    for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
      for (int i = 0; i < 16; ++i) fence_operand(o[mb][i]);
    wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk)
        wgmma_m64n32k16<1>(o[mb], smem_desc_mn(stage + mb * kBoxBytes + kk * 2048, kBoxBytes),
                           smem_desc(p_s + 32 * kk));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
      for (int i = 0; i < 16; ++i) fence_operand(o[mb][i]);
  }
  copy_async_wait<0>();

  // The heads' sums over this warp's positions (lanes of one tq), per warp; the final maxima per warpgroup.
#pragma unroll
  for (int jh = 0; jh < 2; ++jh)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float l = l_run[jh][e];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int h = 8 * jh + 2 * tq + e;
      if (g == 0) red_sum[(wg * 4 + warp) * kHeads + h] = l;
      if (g == 0 && warp == 0) m_fin[wg * kHeads + h] = m_run[jh][e];
    }
  __syncthreads();  // sums and maxima complete; every warpgroup is past its last MMA (stage 0 is free)

  // Weight of warpgroup w's state for head h (the merge of splits: exp(m_w - max), 0 if it saw nothing).
  auto weight = [&](int w, int h) {
    float m = m_fin[h];
#pragma unroll
    for (int v = 1; v < kWGs; ++v) m = fmaxf(m, m_fin[v * kHeads + h]);
    const float mw = m_fin[w * kHeads + h];
    return mw == -INFINITY ? 0.0f : expf(mw - m);
  };
  // This warpgroup's O = hi + lo columns, weighted, staged as [16 heads][512 (+4)] floats in stage 0.
  float* const o_s = reinterpret_cast<float*>(gbase + wg * kOsBytes);
#pragma unroll
  for (int jh = 0; jh < 2; ++jh)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = 8 * jh + 2 * tq + e;
      const float f = kWGs == 1 ? 1.0f : weight(wg, h);
#pragma unroll
      for (int mb = 0; mb < kR / 64; ++mb)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = 64 * mb + 16 * warp + g + 8 * half;
          o_s[h * kLdO + r] = (o[mb][4 * jh + 2 * half + e] + o[mb][4 * (jh + 2) + 2 * half + e]) * f;
        }
    }
  // Head h's maximum and sum over the warpgroups (fixed order), once per head: ml_s[h], ml_s[16 + h] (the
  // maxima buffer, free after the loop).
  float* const ml_s = reinterpret_cast<float*>(gbase + L::kRedOff);
  if (tid < kHeads) {
    float l = 0.0f, m = m_fin[tid];
    for (int w = 0; w < kWGs; ++w) {
      float lw = 0.0f;
#pragma unroll
      for (int v = 0; v < 4; ++v) lw += red_sum[(w * 4 + v) * kHeads + tid];
      l += kWGs == 1 ? lw : weight(w, tid) * lw;
      if (w > 0) m = fmaxf(m, m_fin[w * kHeads + tid]);
    }
    ml_s[tid] = m;
    ml_s[kHeads + tid] = l;
  }
  __syncthreads();

  write_outputs<kWGs>(gbase, ml_s, out, ws_acc, ws_ml, arrivals, tl, t, H, h0, hg, split, splits,
                      reinterpret_cast<float*>(gbase + kTileBytes) /* stage 1 */,
                      reinterpret_cast<int*>(gbase + L::kFlagOff));
}

template <int kWGs>
bool configure_instance() {
  const bool set = cudaFuncSetAttribute(mla_wgmma_kernel<kWGs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(WgLayout<kWGs>::kSmemBytes)) == cudaSuccess;
  if (!set) cudaGetLastError();
  return set;
}

// DSINFER_MLA_WG_GROUPS (read once): 1 or 2 consumer warpgroups per block, or 3 (default): the TMA
// instance with a producer warp (mla_wgmma_tma_kernels.cu), which falls back to 2 where it does not apply.
int& groups_setting() {
  static int groups = env_int("DSINFER_MLA_WG_GROUPS", 3, 1, 3);
  return groups;
}

}  // namespace

int mla_wg_groups() {
  return groups_setting();
}

void mla_set_wg_groups(int groups) {
  groups_setting() = groups >= 1 && groups <= 3 ? groups : 3;
}

bool mla_wgmma_supported() {
  // wgmma: the sm_90a cubin only. Configured once, outside any capture; false without a GPU.
  static const bool ok = device_available() && arch_path() == ArchPath::kHopper && configure_instance<1>() &&
                         configure_instance<2>();
  return ok;
}

void launch_attention_mla_wgmma(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml,
                                int* arrivals, int64_t T, int64_t H, float scale, const MlaSplit& split) {
  const int64_t groups = (H + kHeads - 1) / kHeads;
  DSI_CHECK(split.wgmma && split.tile_rows == kRows && T * groups < (int64_t{1} << 31) &&
                split.splits < 65536 && split.chunk % kRows == 0 && mla_wgmma_supported(),
            "attention_mla (tensor cores, wgmma): bad launch shape");
  const dim3 grid(static_cast<unsigned>(T * groups), static_cast<unsigned>(split.splits));
  auto launch = [&](auto kernel, int threads, size_t smem) {
    launch_pdl(kernel, grid, threads, smem, q_lat, q_pe, cache, plan, out, ws_acc, ws_ml, arrivals,
               static_cast<int>(H), scale, split.splits, split.chunk);
  };
  if (groups_setting() == 3 && mla_wgmma_tma_usable(plan, reinterpret_cast<uintptr_t>(cache))) {
    launch_attention_mla_wgmma_tma(q_lat, q_pe, cache, plan, out, ws_acc, ws_ml, arrivals, T, H, scale,
                                   split);
    return;
  }
  if (groups_setting() == 1)
    launch(mla_wgmma_kernel<1>, WgLayout<1>::kThreads, WgLayout<1>::kSmemBytes);
  else
    launch(mla_wgmma_kernel<2>, WgLayout<2>::kThreads, WgLayout<2>::kSmemBytes);
  check_launch("attention_mla (tensor cores, wgmma)");
}

}  // namespace dsinfer::cuda
