// The persistent decode GEMV kernel: a grid of about (SMs x resident blocks) blocks, each walking the row
// tiles blockIdx.x, blockIdx.x + gridDim.x, ... of the launch. Every warp's cp.async pipeline runs across
// the tiles (it issues the next tile's first stages while it finishes the current tile's MMAs and the
// block's reduction), so the pipeline ramp is paid once per block instead of once per tile. A tile's sums
// are those of gemv_mma_kernel without a split (same K order, same reduction order, same epilogue), so
// both kernels give identical bits for the same shape. The STAMPS instances also record each block's
// timeline (gemv_stamps.h) and compute the same bits. Included by gemv_kernels.cu only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_device.cuh"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/pdl.cuh"

namespace dsinfer::cuda::gemv_detail {

// The GPU's global nanosecond clock (the same on every SM).
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Field `field` of this block's stamps (thread 0 only; STAMPS instances only).
template <bool STAMPS>
__device__ __forceinline__ void stamp(const Params& p, int field, uint64_t value) {
  if constexpr (STAMPS) {
    if (threadIdx.x == 0) p.stamps[static_cast<int64_t>(blockIdx.x) * kGemvStampFields + field] = value;
  }
}

// The clock now into point `point` (the plain instances do not read the clock at all).
template <bool STAMPS>
__device__ __forceinline__ void stamp_now(const Params& p, int point) {
  if constexpr (STAMPS) stamp<STAMPS>(p, point, global_ns());
}

// Block = W warps; a tile is 16 * TILES weight rows (SwiGLU: 16 gate rows and the same 16 up rows) over all
// of K, warp w taking the 32 * U-column slices w, w + W, ... of it; p.tiles tiles in all (the matrices'
// tiles back to back, p.mats[i].first_block the first of matrix i). Needs K % 8 == 0 and 16-byte aligned
// pointers; no split-K. STAMPS: p.stamps receives the block's timeline.
template <int W, int TILES, int U, int S, int SPLITS, bool SWIGLU, bool STAMPS>
__global__ void __launch_bounds__(W * 32, 16 / W) gemv_persistent_kernel(const Params p) {
  extern __shared__ uint4 pipe[];                      // [W][S][U][TILES][2][32]
  constexpr int64_t kRows = SWIGLU ? 16 : 16 * TILES;  // output rows of a tile
  constexpr int kStage = U * TILES * 2 * 32;           // uint4 of one warp's stage
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K;
  uint4* mine = pipe + static_cast<int64_t>(warp) * S * kStage + lane;

  // This block's tiles and this warp's iterations per tile (the same for every tile: all share K).
  const int64_t stride = gridDim.x;
  const int64_t my_tiles = blockIdx.x < p.tiles ? (p.tiles - 1 - blockIdx.x) / stride + 1 : 0;
  const int64_t first = static_cast<int64_t>(warp) * 32 * U, step = static_cast<int64_t>(W) * 32 * U;
  const int64_t iters = first < K ? (K - first + step - 1) / step : 0;
  const int64_t total = my_tiles * iters;  // this warp's pipeline iterations over all its tiles

  // The issue cursor: the tile and iteration the next stage copies, rows g and g + 8 of each of the tile's
  // MMA tiles (out-of-range rows read as zeros).
  const uint16_t* wrow[TILES][2];
  bool wok[TILES][2];
  auto aim = [&](int64_t tile) {
    int64_t local = 0;
    const MatDesc d = block_matrix(p, tile, local);
    const int64_t row0 = local * kRows;
#pragma unroll
    for (int j = 0; j < TILES; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * h;
        const uint16_t* base = SWIGLU ? p.mats[j].w : d.w;
        wok[j][h] = n < d.N;
        wrow[j][h] = base + (wok[j][h] ? n : 0) * K;
      }
    }
  };
  int64_t issued = 0, issue_i = 0, issue_tile = blockIdx.x;
  int issue_stage = 0;
  if (total > 0) aim(issue_tile);
  // Copies the next stage (if any is left) and commits a group either way, as gemv_mma_kernel does.
  auto issue_next = [&] {
    if (issued < total) {
      uint4* stage = mine + issue_stage * kStage;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k0 = first + issue_i * step + 32 * u + 8 * t;
        const bool kin = k0 < K;
#pragma unroll
        for (int j = 0; j < TILES; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            copy_async16(stage + ((u * TILES + j) * 2 + h) * 32, wrow[j][h] + (kin ? k0 : 0),
                         kin && wok[j][h]);
      }
      ++issued;
      if (issued == total) stamp_now<STAMPS>(p, kStampLastIssue);
      issue_stage = issue_stage + 1 == S ? 0 : issue_stage + 1;
      if (++issue_i == iters) {
        issue_i = 0;
        issue_tile += stride;
        if (issued < total) aim(issue_tile);
      }
    }
    copy_async_commit();
  };
  stamp_now<STAMPS>(p, kStampStart);
  pdl_trigger();
  // The weights do not depend on earlier kernels: the first tile's first stages are in flight before the
  // wait for the kernel that wrote x (programmatic dependent launch; a no-op without it).
#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue_next();
  stamp_now<STAMPS>(p, kStampIssued);
  pdl_wait();
  stamp_now<STAMPS>(p, kStampWaited);

  const bool xok = g < p.M;
  const float* xrow = p.x + (xok ? g : 0) * K;
  const bool has_norm = p.norm != nullptr;
  // The cross-warp reduction's own buffers (not the pipeline's, whose next stages are landing meanwhile).
  __shared__ float red[W][TILES * 4][32];
  __shared__ float ssq[W][32];
  int use_stage = 0;
  for (int64_t k = 0; k < my_tiles; ++k) {
    // One accumulator per tile and activation part: independent MMA chains.
    float acc[TILES][SPLITS][4];
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int l = 0; l < SPLITS; ++l) acc[j][l][0] = acc[j][l][1] = acc[j][l][2] = acc[j][l][3] = 0.0f;
    float sumsq = 0.0f;  // of x[g, this lane's columns]
    for (int64_t i = 0; i < iters; ++i) {
      // This iteration's activations are requested before the next weight stage, so that they do not queue
      // behind its bytes (after the PDL wait the first stages have landed and x is what the warp waits for).
      float4 xv[U][2];
      uint4 nv[U];
      load_activations<U>(p, xrow, xok, first + i * step, K, t, xv, nv);
      issue_next();  // past this tile's last stage: the next tile's
      copy_async_wait<S - 1>();
      mma_stage<TILES, U, SPLITS>(xv, nv, has_norm, mine + use_stage * kStage, acc, sumsq);
      use_stage = use_stage + 1 == S ? 0 : use_stage + 1;
      if (k == 0 && i == 0) stamp_now<STAMPS>(p, kStampConsumed);
    }

    // Sum the warps' partial tiles (and sums of squares) in a fixed order. The buffers are free once every
    // warp is past the previous tile's epilogue.
    if (k > 0) __syncthreads();
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = part_sum<TILES, SPLITS>(acc, j, i);
    ssq[warp][lane] = sumsq;
    __syncthreads();

    // Epilogue spread over the warps: output o = 4 j + i of the tile (lane (g, t) holds rows g (i < 2) or
    // g + 8, activation row m = 2t + (i & 1)) on warp o % W; the sums in gemv_mma_kernel's order.
    int64_t local = 0;
    const MatDesc d = block_matrix(p, blockIdx.x + k * stride, local);
    const int64_t row0 = local * kRows;
    constexpr int kOut = SWIGLU ? 4 : TILES * 4;
    for (int o = warp; o < kOut; o += W) {
      const int j = o / 4, i = o % 4;
      float v = 0.0f, up = 0.0f;
      for (int w = 0; w < W; ++w) v += red[w][j * 4 + i][lane];
      if (SWIGLU)
        for (int w = 0; w < W; ++w) up += red[w][(TILES - 1) * 4 + i][lane];
      const int m = 2 * t + (i & 1);
      float inv = 1.0f;
      if (has_norm) {
        float s = 0.0f;
        for (int w = 0; w < W; ++w)
          for (int tt = 0; tt < 4; ++tt) s += ssq[w][m * 4 + tt];
        inv = norm_scale(s, K, p.eps);
      }
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * (i >> 1);
      if (m < p.M && n < d.N) store_output<SWIGLU>(p, d, m, n, v, up, inv);
    }
  }
  copy_async_wait<0>();
  if constexpr (STAMPS) {
    stamp_now<STAMPS>(p, kStampEnd);
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    stamp<STAMPS>(p, kStampFieldSm, sm);
    stamp<STAMPS>(p, kStampFieldTiles, static_cast<uint64_t>(my_tiles));
  }
}

}  // namespace dsinfer::cuda::gemv_detail
