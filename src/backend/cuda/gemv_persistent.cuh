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
#include "backend/cuda/gemv_units.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_common.cuh"

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

// Unit u's weight base of matrix i (row units: gate 0, up 1; column units: down 0) and its row stride, into
// the block's table: the shared experts' slices (u < known) need nothing from earlier kernels, the routed
// experts' ids are read after the PDL wait. Packed column units: a shared unit's base is its first 32-column
// chunk in row group 0 (chunk u len / 32 of 512 values each); the row stride stays the matrix's columns, so
// that row group r / 16 starts r * ld after the base.
template <int UNITS>
__device__ __forceinline__ void resolve_unit(const Params& p, int u, const uint16_t* (*w)[2], int64_t* ld) {
  const UnitParams& q = p.units;
  constexpr bool kRowU = row_units(UNITS);
  constexpr int kMats = kRowU ? 2 : 1;
  int64_t e = u < q.known ? 0 : q.ids[u - q.known];
  if (e < 0 || e >= q.experts) e = 0;  // its outputs are zeroed (row units' epilogue)
#pragma unroll
  for (int i = 0; i < kMats; ++i) {
    if (u < q.known)
      w[u][i] = q.shared[i] + (kRowU                         ? u * q.len * p.K
                               : UNITS == kPackedColumnUnits ? packed_chunk_offset(0, u * q.len, 0)
                                                             : u * q.len);
    else
      w[u][i] = q.routed[i] + e * q.stride[i];
  }
  ld[u] = kRowU ? p.K : (u < q.known ? q.known * q.len : q.len);
}

// Block = W warps; a tile is 16 * TILES weight rows (SwiGLU: 16 gate rows and the same 16 up rows) over all
// of K, warp w taking the 32 * U-column slices w, w + W, ... of it; p.tiles tiles in all (the matrices'
// tiles back to back, p.mats[i].first_block the first of matrix i). Needs K % 8 == 0 and 16-byte aligned
// pointers; no split-K. STAMPS: p.stamps receives the block's timeline. UNITS (kRowUnits with SWIGLU,
// kColumnUnits without; p.units): the weights of unit u come from the block's unit table instead of
// p.mats[*].w; stages of routed units are issued only after the wait; row units scale the routed outputs.
// UNITS == kPackedWeights: the weights come from the packed copies (p.mats[*].packed, gemv_packed.h), a stage
// being TILES bulk copies of U fragments (1 KB each; fragments past K are zeroed by the lanes) that complete
// on the warp's mbarrier of that stage, the stage tile-major ([TILES][U][2][32]) so that each tile's
// fragments land in one piece; the same bits as the 16-byte copies. kPackedRowUnits / kPackedColumnUnits:
// units read from packed copies the same way (the host takes them only where p.kchunks = K / 32 exactly for
// row units, and where a stage's 32 U columns never cross a unit and the tiles' row groups lie inside N for
// column units).
template <int W, int TILES, int U, int S, int SPLITS, bool SWIGLU, bool STAMPS, int UNITS = 0>
__global__ void __launch_bounds__(W * 32, 16 / W) gemv_persistent_kernel(const Params p) {
  constexpr bool kPacked = packed_weights(UNITS);
  constexpr bool kRowU = row_units(UNITS), kColU = column_units(UNITS);
  constexpr bool kUnits = kRowU || kColU;
  static_assert(!kUnits || kRowU == SWIGLU, "row units are SwiGLU's, column units not");
  extern __shared__ uint4 pipe[];                      // [W][S][U][TILES][2][32]
  constexpr int64_t kRows = SWIGLU ? 16 : 16 * TILES;  // output rows of a tile
  constexpr int kStage = U * TILES * 2 * 32;           // uint4 of one warp's stage
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K;
  const WeightL2 wl2 = weight_l2(p.weights_evict_first);
  uint4* mine = pipe + static_cast<int64_t>(warp) * S * kStage + lane;
  // The stage's fragment (chunk u, tile j).
  auto frag = [](int u, int j) { return kPacked ? j * U + u : u * TILES + j; };
  uint32_t bars = 0;  // packed: this warp's mbarrier of stage 0 (shared address; stage s at + 8 s)
  const uint32_t mine_s = static_cast<uint32_t>(__cvta_generic_to_shared(mine - lane));
  if constexpr (kPacked) {
    __shared__ __align__(8) uint64_t stage_bars[W][S];
    bars = static_cast<uint32_t>(__cvta_generic_to_shared(&stage_bars[warp][0]));
    if (lane == 0)
      for (int s = 0; s < S; ++s) tma::mbar_init(bars + 8 * s, 1);
    tma::mbar_init_fence();
    __syncwarp();
  }
  // Units: the table after the pipeline (kGemvUnitTableBytes more dynamic shared memory): each unit's
  // weight bases [kGemvMaxUnits][2], then its row strides [kGemvMaxUnits].
  auto* unit_w = reinterpret_cast<const uint16_t*(*)[2]>(pipe + static_cast<int64_t>(W) * S * kStage);
  auto* unit_ld = reinterpret_cast<int64_t*>(unit_w + kGemvMaxUnits);
  if constexpr (kUnits) {
    if (threadIdx.x < p.units.known) resolve_unit<UNITS>(p, threadIdx.x, unit_w, unit_ld);
    __syncthreads();
  }

  // This block's tiles and this warp's iterations per tile (the same for every tile: all share K).
  const int64_t stride = gridDim.x;
  const int64_t my_tiles = blockIdx.x < p.tiles ? (p.tiles - 1 - blockIdx.x) / stride + 1 : 0;
  const int64_t first = static_cast<int64_t>(warp) * 32 * U, step = static_cast<int64_t>(W) * 32 * U;
  const int64_t iters = first < K ? (K - first + step - 1) / step : 0;
  const int64_t total = my_tiles * iters;  // this warp's pipeline iterations over all its tiles

  // The issue cursor: the tile and iteration the next stage copies, rows g and g + 8 of each of the tile's
  // MMA tiles (out-of-range rows read as zeros).
  const uint16_t* wrow[TILES][2];
  const uint16_t* prow[TILES] = {};  // packed: each tile's row group (its chunk 0)
  bool wok[TILES][2];
  int64_t nrow[TILES][2];  // column units: the rows (their address depends on the column's unit)
  auto aim = [&](int64_t tile) {
    if constexpr (kRowU) {
      const UnitRowTile ut = unit_row_tile(tile, p.units.len);
      if constexpr (kPacked) {
        // Row group ut.row / 16 of the unit's matrix j (K % 32 == 0).
#pragma unroll
        for (int j = 0; j < TILES; ++j) prow[j] = unit_w[ut.unit][j] + packed_chunk_offset(ut.row, 0, K);
      } else {
#pragma unroll
        for (int j = 0; j < TILES; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            wok[j][h] = true;
            wrow[j][h] = unit_w[ut.unit][j] + (ut.row + g + 8 * h) * K;
          }
      }
      return;
    }
    int64_t local = 0;
    const MatDesc d = block_matrix(p, tile, local);
    const int64_t row0 = local * kRows;
    if constexpr (UNITS == kPackedColumnUnits) {
      // Each tile's first row (its row group's): the stage's address also depends on its columns' unit.
      (void)d;
#pragma unroll
      for (int j = 0; j < TILES; ++j) nrow[j][0] = nrow[j][1] = row0 + 16 * j;
    } else if constexpr (kPacked) {
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const int64_t group = row0 / 16 + (SWIGLU ? 0 : j);
        prow[j] = (SWIGLU ? p.mats[j].packed : d.packed) + group * p.kchunks * 512;
      }
    } else {
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * h;
          const uint16_t* base = SWIGLU ? p.mats[j].w : d.w;
          wok[j][h] = n < d.N;
          wrow[j][h] = base + (wok[j][h] ? n : 0) * K;
          nrow[j][h] = wok[j][h] ? n : 0;
        }
      }
    }
  };
  int64_t issued = 0, issue_i = 0, issue_tile = blockIdx.x;
  int issue_stage = 0;
  // Column units: the unit and unit-local column of the issue cursor's first column, first + issue_i * step.
  const int64_t ulen = kColU ? p.units.len : 1;
  const UnitColumnCursor first_cursor = UnitColumnCursor::at(first, ulen);
  UnitColumnCursor cursor = first_cursor;
  if (total > 0) aim(issue_tile);  // row units: aimed again after the wait (routed units' bases)
  // Moves the issue cursor past the stage just issued.
  auto advance = [&] {
    ++issued;
    if (issued == total) stamp_now<STAMPS>(p, kStampLastIssue);
    issue_stage = issue_stage + 1 == S ? 0 : issue_stage + 1;
    if constexpr (kColU) cursor.advance(step, ulen);
    if (++issue_i == iters) {
      issue_i = 0;
      cursor = first_cursor;
      issue_tile += stride;
      if (issued < total) aim(issue_tile);
    }
  };
  // Copies the next stage (if any is left) and commits a group either way, as gemv_mma_kernel does.
  auto issue_next = [&] {
    if constexpr (kPacked) {
      if (issued < total) {
        // Every lane is past its reads of this stage (consumed two iterations ago) before the copy engine
        // overwrites it.
        __syncwarp();
        const int64_t col0 = first + issue_i * step;  // the stage's first column
        int valid;
        const uint16_t* from;  // lane j < TILES copies tile j's fragments, from here on
        if constexpr (UNITS == kPackedColumnUnits) {
          // The stage's 32 U columns lie in the cursor's unit: chunk local / 32 of its tiles' row groups.
          valid = col0 < K ? U : 0;
          const int cu = valid > 0 ? cursor.unit : 0;
          const int64_t ld = unit_ld[cu];
          const int64_t local = valid > 0 ? cursor.local : 0;
          from = unit_w[cu][0] + packed_chunk_offset(nrow[0][0], local, ld);
#pragma unroll
          for (int j = 1; j < TILES; ++j)
            if (lane == j) from = unit_w[cu][0] + packed_chunk_offset(nrow[j][0], local, ld);
        } else {
          const int64_t c0 = col0 / 32;  // the stage's first 32-column chunk
          const int64_t left = p.kchunks - c0;
          valid = left <= 0 ? 0 : left >= U ? U : static_cast<int>(left);
          from = prow[0];
#pragma unroll
          for (int j = 1; j < TILES; ++j)
            if (lane == j) from = prow[j];
          from += c0 * 512;
        }
        const uint32_t bar = bars + 8 * issue_stage;
        if (lane == 0) {
          if (valid > 0)
            tma::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(TILES * valid * 1024));
          else
            tma::mbar_arrive(bar);
        }
        if (lane < TILES && valid > 0)
          bulk_copy(mine_s + static_cast<uint32_t>((issue_stage * kStage + lane * U * 64) * 16), from,
                    static_cast<uint32_t>(valid * 1024), bar, wl2);
        uint4* stage = mine + issue_stage * kStage;
        for (int u = valid; u < U; ++u)
#pragma unroll
          for (int j = 0; j < TILES; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) stage[(frag(u, j) * 2 + h) * 32] = make_uint4(0, 0, 0, 0);
        advance();
      }
    } else if (issued < total) {
      uint4* stage = mine + issue_stage * kStage;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k0 = first + issue_i * step + 32 * u + 8 * t;
        const bool kin = k0 < K;
        if constexpr (UNITS == kColumnUnits) {
          // A 32-column chunk lies in one unit (len % 32 == 0, len >= 32 U).
          const UnitColumnCursor c = cursor.plus(32 * u, ulen);
          const int cu = kin ? c.unit : 0;
          const int64_t lc = kin ? c.local : 0;
          const uint16_t* ubase = unit_w[cu][0] + lc + 8 * t;
          const int64_t ld = unit_ld[cu];
#pragma unroll
          for (int j = 0; j < TILES; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              copy_async16(stage + (frag(u, j) * 2 + h) * 32, ubase + nrow[j][h] * ld, kin && wok[j][h], wl2);
        } else {
#pragma unroll
          for (int j = 0; j < TILES; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              copy_async16(stage + (frag(u, j) * 2 + h) * 32, wrow[j][h] + (kin ? k0 : 0), kin && wok[j][h],
                           wl2);
        }
      }
      advance();
    }
    copy_async_commit();
  };
  stamp_now<STAMPS>(p, kStampStart);
  pdl_trigger();
  // The weights do not depend on earlier kernels: the first tile's first stages are in flight before the
  // wait for the kernel that wrote x (programmatic dependent launch; a no-op without it). Units: only the
  // stages of the shared experts' units (the routed experts are known after the wait).
  auto known_stage = [&] {
    if constexpr (kRowU) return unit_row_tile(issue_tile, p.units.len).unit < p.units.known;
    if constexpr (kColU)
      return first + issue_i * step + 32 * U <= static_cast<int64_t>(p.units.known) * p.units.len;
    return true;
  };
  // Paced (p.preissue_inflight = n > 0): stage s waits for stage s - n to land before it is issued, so
  // that the weights stream in beside the kernel before without queueing its memory round trips. Only a stage
  // that was issued is waited for: a warp with fewer iterations than stages issues nothing more, and the
  // mbarrier of a packed stage never issued would never complete.
  int pre = 0;
  const int paced = p.preissue_inflight;
#pragma unroll
  for (int s = 0; s < S - 1; ++s)
    if (pre == s && known_stage()) {
      if (paced > 0 && s >= paced && issued > s - paced) {
        if constexpr (kPacked)
          tma::mbar_wait(bars + 8 * (s - paced), 0u);
        else if (paced == 1)
          copy_async_wait<0>();
        else
          copy_async_wait<1>();
      }
      issue_next();
      ++pre;
    }
  stamp_now<STAMPS>(p, kStampIssued);
  pdl_wait();
  stamp_now<STAMPS>(p, kStampWaited);
  if constexpr (kUnits) {
    if (threadIdx.x >= p.units.known && threadIdx.x < p.units.count)
      resolve_unit<UNITS>(p, threadIdx.x, unit_w, unit_ld);
    __syncthreads();
    if (issued < total) aim(issue_tile);
    for (; pre < S - 1; ++pre) issue_next();
  }

  // Two parts as MMA columns (mma_stage_columns): lane (g, t) loads activation row g / 2 and its outputs are
  // rows g and g + 8 of activation row t; the same bits as the part-per-MMA form.
  const bool cols = SPLITS == 2 && p.parts_in_columns && p.M <= 4;
  const int xr = cols ? g >> 1 : g;  // the activation row this lane loads
  const bool xok = xr < p.M;
  const float* xrow = p.x + (xok ? xr : 0) * K;
  const bool has_norm = p.norm != nullptr;
  // The cross-warp reduction's own buffers (not the pipeline's, whose next stages are landing meanwhile).
  __shared__ float red[W][TILES * 4][32];
  __shared__ float ssq[W][32];
  int use_stage = 0;
  uint32_t use_phase = 0;  // packed: the parity of the stage's next completion
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
      if constexpr (kPacked)
        tma::mbar_wait(bars + 8 * use_stage, use_phase);
      else
        copy_async_wait<S - 1>();
      if constexpr (SPLITS == 2) {
        if (cols)
          mma_stage_columns<TILES, U, kPacked>(xv, nv, has_norm, mine + use_stage * kStage, acc, sumsq,
                                               g & 1);
        else
          mma_stage<TILES, U, SPLITS, kPacked>(xv, nv, has_norm, mine + use_stage * kStage, acc, sumsq);
      } else {
        mma_stage<TILES, U, SPLITS, kPacked>(xv, nv, has_norm, mine + use_stage * kStage, acc, sumsq);
      }
      use_stage = use_stage + 1 == S ? 0 : use_stage + 1;
      use_phase ^= use_stage == 0 ? 1u : 0u;
      if (k == 0 && i == 0) stamp_now<STAMPS>(p, kStampConsumed);
    }

    // Sum the warps' partial tiles (and sums of squares) in a fixed order. The buffers are free once every
    // warp is past the previous tile's epilogue.
    if (k > 0) __syncthreads();
    if (cols) {
      // Rows g + 8 h of activation row t: low part (column 2 t + 1) + high part (column 2 t), part_sum's
      // order.
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) red[warp][j * 4 + h][lane] = acc[j][0][2 * h + 1] + acc[j][0][2 * h];
    } else {
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = part_sum<TILES, SPLITS>(acc, j, i);
    }
    ssq[warp][lane] = sumsq;
    __syncthreads();

    // Epilogue spread over the warps: output o = 4 j + i of the tile (lane (g, t) holds rows g (i < 2) or
    // g + 8, activation row m = 2t + (i & 1)) on warp o % W; the sums in gemv_mma_kernel's order.
    int64_t local = 0;
    const MatDesc d = block_matrix(p, blockIdx.x + k * stride, local);
    int64_t row0 = local * kRows;
    float unit_scale = 1.0f;  // row units: the routed unit's factor (0: an id outside the experts)
    if constexpr (kRowU) {
      const UnitRowTile ut = unit_row_tile(local, p.units.len);
      const int unit = ut.unit;
      row0 = unit * p.units.len + ut.row;
      if (unit >= p.units.known) {
        const int e = p.units.ids[unit - p.units.known];
        unit_scale = e < 0 || e >= p.units.experts ? 0.0f
                     : p.units.scale               ? p.units.scale[unit - p.units.known]
                                                   : 1.0f;
      }
    }
    constexpr int kOut = SWIGLU ? 4 : TILES * 4;
    for (int o = warp; o < kOut; o += W) {
      const int j = o / 4, i = o % 4;
      if (cols && i >= 2) continue;  // columns: i is h (rows g + 8 h), the activation row t
      float v = 0.0f, up = 0.0f;
      for (int w = 0; w < W; ++w) v += red[w][j * 4 + i][lane];
      if (SWIGLU)
        for (int w = 0; w < W; ++w) up += red[w][(TILES - 1) * 4 + i][lane];
      const int m = cols ? t : 2 * t + (i & 1);
      float inv = 1.0f;
      if (has_norm) {
        // Row m's sum of squares: its lanes' (columns: the lanes of its high part, which loaded it).
        const int lane0 = (cols ? 2 * m : m) * 4;
        float s = 0.0f;
        for (int w = 0; w < W; ++w)
          for (int tt = 0; tt < 4; ++tt) s += ssq[w][lane0 + tt];
        inv = norm_scale(s, K, p.eps);
      }
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * (cols ? i : i >> 1);
      if (m < p.M && n < d.N) store_output<SWIGLU, kRowU>(p, d, m, n, v, up, inv, unit_scale);
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
