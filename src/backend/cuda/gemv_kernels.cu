// GEMV kernels for M <= 8 (see gemv_kernels.h). The MMA kernel maps y^T = w x^T onto
// mma.m16n8k16 (A = 16 weight rows, B = x^T with the 8 activation rows as columns). The k order inside a
// 32-column chunk is permuted so that every lane loads 8 consecutive weights (one uint4) of row g and of
// row g + 8 and the 8 matching activations (two float4): lane (g, t) takes columns [8t, 8t + 8) of the
// chunk, the first MMA of the chunk gets columns 8t + {0..3}, the second 8t + {4..7}.
// Split-K (gridDim.y = s > 1): block (b, j) covers columns [j c, (j + 1) c) of row tile b, writes its
// block-reduced partials to the workspace, and the last block to arrive on tile b's counter sums the s
// partials in split order, applies the epilogue and resets the counter.
// The persistent kernel (gemv_persistent.cuh, GemvConfig::persist) computes each row tile as the unsplit
// MMA kernel does, both through the pieces of gemv_device.cuh; this file holds the per-launch kernels, the
// compiled shapes, the shape choice and the launches.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/gemv_device.cuh"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/gemv_persistent.cuh"
#include "backend/cuda/gemv_plan.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/gemv_workspace.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using namespace gemv_detail;

constexpr int kWarps = 8;  // the generic kernel's warps and the MMA kernel's default
constexpr int kThreads = kWarps * 32;

// Block = W warps over 16 * TILES weight rows (SwiGLU: 16 gate rows and the same 16 up rows) and K columns
// [kbase, kend) (all of K without a split); warp w takes the 32 * U-column slices w, w + W, ... of them.
// The weights stream through an S-stage cp.async pipeline per lane (each lane reads back only what it
// copied, so no barrier is needed); activations and the norm weight come through L1. Needs K % 8 == 0 and
// 16-byte aligned pointers.
template <int W, int TILES, int U, int S, int SPLITS, bool SWIGLU>
__global__ void __launch_bounds__(W * 32, 16 / W) gemv_mma_kernel(const Params p) {
  extern __shared__ uint4 pipe[];  // [W][S][U][TILES][2][32]
  int64_t local = 0;
  const MatDesc d = block_matrix(p, blockIdx.x, local);
  const int64_t row0 = local * (SWIGLU ? 16 : 16 * TILES);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K;
  const int64_t kbase = static_cast<int64_t>(blockIdx.y) * p.kcols;
  const int64_t kend = min(K, kbase + p.kcols);
  const WeightL2 wl2 = weight_l2(p.weights_evict_first);
  uint4* mine = pipe + static_cast<int64_t>(warp) * S * U * TILES * 2 * 32 + lane;
  auto slot = [&](int s, int u, int j, int h) { return mine + (((s * U + u) * TILES + j) * 2 + h) * 32; };

  // Rows g and g + 8 of every tile (out-of-range rows read as zeros).
  const uint16_t* wrow[TILES][2];
  bool wok[TILES][2];
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
  const bool xok = g < p.M;
  const float* xrow = p.x + (xok ? g : 0) * K;
  const bool has_norm = p.norm != nullptr;

  // Iteration i of this warp covers columns [first + i step, first + i step + 32 U).
  const int64_t first = kbase + static_cast<int64_t>(warp) * 32 * U, step = static_cast<int64_t>(W) * 32 * U;
  const int64_t iters = first < kend ? (kend - first + step - 1) / step : 0;
  auto issue = [&](int64_t i) {
    const int s = static_cast<int>(i % S);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = first + i * step + 32 * u + 8 * t;
      const bool kin = k0 < kend;
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          copy_async16(slot(s, u, j, h), wrow[j][h] + (kin ? k0 : 0), kin && wok[j][h], wl2);
    }
  };
  pdl_trigger();
  // The weights do not depend on earlier kernels: the first stages are in flight before the wait for the
  // kernel that wrote x (programmatic dependent launch; a no-op without it).
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < iters) issue(s);
    copy_async_commit();
  }
  pdl_wait();

  // One accumulator per tile and activation part: independent MMA chains.
  float acc[TILES][SPLITS][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int l = 0; l < SPLITS; ++l) acc[j][l][0] = acc[j][l][1] = acc[j][l][2] = acc[j][l][3] = 0.0f;
  float sumsq = 0.0f;  // of x[g, this lane's columns]
  for (int64_t i = 0; i < iters; ++i) {
    if (i + S - 1 < iters) issue(i + S - 1);
    copy_async_commit();
    // Activations and norm weights of this iteration (L1 hits mostly) while the weights land.
    float4 xv[U][2];
    uint4 nv[U];
    load_activations<U>(p, xrow, xok, first + i * step, kend, t, xv, nv);
    copy_async_wait<S - 1>();
    mma_stage<TILES, U, SPLITS>(xv, nv, has_norm, slot(static_cast<int>(i % S), 0, 0, 0), acc, sumsq);
  }
  copy_async_wait<0>();

  // Sum the warps' partial tiles (and sums of squares) in a fixed order.
  __shared__ float red[W][TILES * 4][32];
  __shared__ float ssq[W][32];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = part_sum<TILES, SPLITS>(acc, j, i);
  ssq[warp][lane] = sumsq;
  __syncthreads();
  if (warp != 0) return;
  float v[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = 0.0f;
      for (int w = 0; w < W; ++w) s += red[w][j * 4 + i][lane];
      v[j][i] = s;
    }
  // Lane (g, t) holds outputs (row g, m = 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of each tile.
  float inv[2] = {1.0f, 1.0f};
  if (p.ksplit > 1) {
    // This block's partials (lane layout) and, in lanes 0..7, row m = lane's sum of squares.
    float* mine_ws =
        p.partials + (static_cast<int64_t>(blockIdx.x) * p.ksplit + blockIdx.y) * slot_floats(TILES);
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) mine_ws[(j * 4 + i) * 32 + lane] = v[j][i];
    if (has_norm && lane < kGemvMaxRows) {
      float s = 0.0f;
      for (int w = 0; w < W; ++w)
        for (int tt = 0; tt < 4; ++tt) s += ssq[w][lane * 4 + tt];
      mine_ws[TILES * 128 + lane] = s;
    }
    // Publish, then count this block in; only the last block of the tile goes on.
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(p.counters + blockIdx.x, 1) == p.ksplit - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
    // Every split's partials in split order (L2 reads: other SMs wrote them), whichever block came last.
    const float* tile_ws = p.partials + static_cast<int64_t>(blockIdx.x) * p.ksplit * slot_floats(TILES);
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float s = __ldcg(tile_ws + (j * 4 + i) * 32 + lane);
        for (int sp = 1; sp < p.ksplit; ++sp)
          s += __ldcg(tile_ws + sp * slot_floats(TILES) + (j * 4 + i) * 32 + lane);
        v[j][i] = s;
      }
    if (has_norm) {
      for (int q = 0; q < 2; ++q) {
        const int m = 2 * t + q;
        float s = __ldcg(tile_ws + TILES * 128 + m);
        for (int sp = 1; sp < p.ksplit; ++sp)
          s += __ldcg(tile_ws + sp * slot_floats(TILES) + TILES * 128 + m);
        inv[q] = norm_scale(s, K, p.eps);
      }
    }
    if (lane == 0) p.counters[blockIdx.x] = 0;  // every split has arrived: ready for the next launch
  } else if (has_norm) {
    for (int q = 0; q < 2; ++q) {
      const int m = 2 * t + q;
      float s = 0.0f;
      for (int w = 0; w < W; ++w)
        for (int tt = 0; tt < 4; ++tt) s += ssq[w][m * 4 + tt];
      inv[q] = norm_scale(s, K, p.eps);
    }
  }
#pragma unroll
  for (int j = 0; j < (SWIGLU ? 1 : TILES); ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1);
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * (i >> 1);
      if (m < p.M && n < d.N)
        store_output<SWIGLU>(p, d, m, n, v[j][i], SWIGLU ? v[TILES - 1][i] : 0.0f, inv[i & 1]);
    }
}

// Any K and alignment: one warp per output row, lanes stride over K, fp32 FMAs.
template <bool SWIGLU>
__global__ void __launch_bounds__(kThreads) gemv_generic_kernel(const Params p) {
  int64_t local = 0;
  const MatDesc d = block_matrix(p, blockIdx.x, local);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = local * kWarps + warp, K = p.K;
  if (n >= d.N) return;
  const uint16_t* w0 = d.w + n * K;
  const uint16_t* w1 = SWIGLU ? p.mats[1].w + n * K : nullptr;
  float acc[2][kGemvMaxRows] = {};
  float ss[kGemvMaxRows] = {};
  for (int64_t k = lane; k < K; k += 32) {
    const float a = bf16_bits_to_float(w0[k]);
    const float b = SWIGLU ? bf16_bits_to_float(w1[k]) : 0.0f;
    const float nw = p.norm ? bf16_bits_to_float(p.norm[k]) : 1.0f;
#pragma unroll
    for (int m = 0; m < kGemvMaxRows; ++m) {
      if (m < p.M) {
        const float xv = p.x[m * K + k];
        ss[m] += xv * xv;
        acc[0][m] += xv * nw * a;
        if (SWIGLU) acc[1][m] += xv * nw * b;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m)
    for (int off = 16; off > 0; off /= 2) {
      acc[0][m] += __shfl_xor_sync(0xffffffffu, acc[0][m], off);
      acc[1][m] += __shfl_xor_sync(0xffffffffu, acc[1][m], off);
      ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], off);
    }
  if (lane != 0) return;
  for (int m = 0; m < p.M; ++m) {
    const float inv = p.norm ? rsqrtf(ss[m] / static_cast<float>(K) + p.eps) : 1.0f;
    store_output<SWIGLU>(p, d, m, n, acc[0][m], acc[1][m], inv);
  }
}

// One compiled MMA kernel: its launch (pad: extra dynamic shared memory, GemvConfig::cap_per_sm), its
// resident blocks per SM (occupancy, queried once), the shared memory one block takes unpadded (dynamic +
// static, as compiled: the packed instances' mbarriers and the units' table included) and the occupancy with
// a padding (which first allows the kernel max_pad more dynamic bytes).
struct MmaKernel {
  void (*launch)(const Params& p, dim3 grid, int pad);
  int blocks_per_sm;
  int64_t smem_bytes;
  int (*padded_occupancy)(int pad, int max_pad);
};

// gemv_mma_kernel, or (PERSIST) gemv_persistent_kernel (gemv_persistent.cuh) of the same shape, its STAMPS
// instance recording block timelines (gemv_stamps.h).
template <int W, int TILES, int U, int S, int SPLITS, bool SWIGLU, bool PERSIST, bool STAMPS, int UNITS = 0>
constexpr void (*mma_kernel_fn())(const Params) {
  if constexpr (PERSIST) {
    return gemv_persistent_kernel<W, TILES, U, S, SPLITS, SWIGLU, STAMPS, UNITS>;
  } else {
    static_assert(!STAMPS && UNITS == 0, "only the persistent kernel records stamps or takes units");
    return gemv_mma_kernel<W, TILES, U, S, SPLITS, SWIGLU>;
  }
}

template <int W, int TILES, int U, int S, int SPLITS, bool SWIGLU, bool PERSIST = false, bool STAMPS = false,
          int UNITS = 0>
const MmaKernel& mma_kernel() {
  static const MmaKernel k = [] {
    constexpr int bytes =
        static_cast<int>(gemv_pipeline_smem(W, TILES, U, S) +
                         (row_units(UNITS) || column_units(UNITS) ? kGemvUnitTableBytes : 0));
    auto* fn = mma_kernel_fn<W, TILES, U, S, SPLITS, SWIGLU, PERSIST, STAMPS, UNITS>();
    // More than the default 48 KiB of dynamic shared memory must be asked for (once per kernel).
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
      cudaGetLastError();
      fail("gemv: cannot configure ", bytes, " bytes of shared memory");
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, W * 32, bytes) != cudaSuccess) {
      cudaGetLastError();
      per_sm = 1;
    }
    cudaFuncAttributes attrs{};
    if (cudaFuncGetAttributes(&attrs, fn) != cudaSuccess) {
      cudaGetLastError();
      attrs.sharedSizeBytes = 0;
    }
    MmaKernel out;
    out.smem_bytes = bytes + static_cast<int64_t>(attrs.sharedSizeBytes);
    out.launch = [](const Params& p, dim3 grid, int pad) {
      launch_pdl(mma_kernel_fn<W, TILES, U, S, SPLITS, SWIGLU, PERSIST, STAMPS, UNITS>(), grid, dim3(W * 32),
                 bytes + pad, p);
    };
    out.blocks_per_sm = per_sm < 1 ? 1 : per_sm;
    out.padded_occupancy = [](int pad, int max_pad) {
      auto* f = mma_kernel_fn<W, TILES, U, S, SPLITS, SWIGLU, PERSIST, STAMPS, UNITS>();
      int n = 0;
      if (cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes + max_pad) !=
              cudaSuccess ||
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, W * 32, bytes + pad) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
      }
      return n;
    };
    return out;
  }();
  return k;
}

// The persistent kernel of shape `shape` (shape_key without the parts digit) with SPLITS activation parts, or
// null (STAMPS: the instances recording stamps; UNITS kPackedWeights: the instances reading packed weights).
template <bool STAMPS, int UNITS, int SPLITS>
const MmaKernel* persistent_shape(int shape, bool swiglu) {
  if (swiglu) {
    switch (shape) {
      case 8214:
        return &mma_kernel<8, 2, 1, 4, SPLITS, true, true, STAMPS, UNITS>();
      case 8223:
        return &mma_kernel<8, 2, 2, 3, SPLITS, true, true, STAMPS, UNITS>();
      case 4214:
        return &mma_kernel<4, 2, 1, 4, SPLITS, true, true, STAMPS, UNITS>();
      case 4223:
        return &mma_kernel<4, 2, 2, 3, SPLITS, true, true, STAMPS, UNITS>();
      case 16223:
        return &mma_kernel<16, 2, 2, 3, SPLITS, true, true, STAMPS, UNITS>();
    }
  } else {
    switch (shape) {
      case 8124:
        return &mma_kernel<8, 1, 2, 4, SPLITS, false, true, STAMPS, UNITS>();
      case 8143:
        return &mma_kernel<8, 1, 4, 3, SPLITS, false, true, STAMPS, UNITS>();
      case 8214:
        return &mma_kernel<8, 2, 1, 4, SPLITS, false, true, STAMPS, UNITS>();
      case 8223:
        return &mma_kernel<8, 2, 2, 3, SPLITS, false, true, STAMPS, UNITS>();
      case 4124:
        return &mma_kernel<4, 1, 2, 4, SPLITS, false, true, STAMPS, UNITS>();
      case 4143:
        return &mma_kernel<4, 1, 4, 3, SPLITS, false, true, STAMPS, UNITS>();
      case 4214:
        return &mma_kernel<4, 2, 1, 4, SPLITS, false, true, STAMPS, UNITS>();
    }
  }
  return nullptr;
}

// The persistent kernel shapes: every one- and two-part shape of find_mma.
template <bool STAMPS, int UNITS = 0>
const MmaKernel& find_persistent(int key, bool swiglu) {
  const int parts = key / 1000 % 10, shape = key / 10000 * 1000 + key % 1000;
  const MmaKernel* k = parts == 2   ? persistent_shape<STAMPS, UNITS, 2>(shape, swiglu)
                       : parts == 1 ? persistent_shape<STAMPS, UNITS, 1>(shape, swiglu)
                                    : nullptr;
  if (k != nullptr) return *k;
  fail("gemv: no persistent kernel for warps ", key / 10000, ", tiles ", key / 100 % 10, ", unroll ",
       key / 10 % 10, ", stages ", key % 10, ", splits ", parts);
}

// A compiled shape's key in the switches below: warps, splits, MMA tiles (SwiGLU: 2), unroll, stages as
// digits.
int shape_key(const GemvConfig& c, bool swiglu) {
  return c.warps * 10000 + c.splits * 1000 + gemv_mma_tiles(c, swiglu) * 100 + c.unroll * 10 + c.stages;
}

// The persistent kernel's units instances (GemvMoeUnits): row units in every SwiGLU persistent shape, column
// units in the shapes resolve gives down-sized launches (K >= 8192; the one-tile capped shape; the 8B-qkv and
// LM-head-sized ones) and the 16-warp shape of units_config. Null: not compiled. STAMPS instances (block
// timelines, gemv_stamps.h) only in units_config's 16-warp shapes; so are the packed instances (units read
// from the packed copies, plain and STAMPS).
const MmaKernel* find_units(GemvConfig c, bool swiglu, bool stamps = false, bool packed = false) {
  const int key = shape_key(c, swiglu);
  if (packed) {
    if (swiglu && key == 162223)
      return stamps ? &mma_kernel<16, 2, 2, 3, 2, true, true, true, kPackedRowUnits>()
                    : &mma_kernel<16, 2, 2, 3, 2, true, true, false, kPackedRowUnits>();
    if (!swiglu && key == 162143)
      return stamps ? &mma_kernel<16, 1, 4, 3, 2, false, true, true, kPackedColumnUnits>()
                    : &mma_kernel<16, 1, 4, 3, 2, false, true, false, kPackedColumnUnits>();
    return nullptr;
  }
  if (stamps) {
    if (swiglu && key == 162223) return &mma_kernel<16, 2, 2, 3, 2, true, true, true, kRowUnits>();
    if (!swiglu && key == 162143) return &mma_kernel<16, 1, 4, 3, 2, false, true, true, kColumnUnits>();
    return nullptr;
  }
  if (swiglu) {
    switch (key) {
      case 82214:
        return &mma_kernel<8, 2, 1, 4, 2, true, true, false, kRowUnits>();
      case 82223:
        return &mma_kernel<8, 2, 2, 3, 2, true, true, false, kRowUnits>();
      case 42214:
        return &mma_kernel<4, 2, 1, 4, 2, true, true, false, kRowUnits>();
      case 42223:
        return &mma_kernel<4, 2, 2, 3, 2, true, true, false, kRowUnits>();
      case 162223:
        return &mma_kernel<16, 2, 2, 3, 2, true, true, false, kRowUnits>();
    }
  } else {
    switch (key) {
      case 82143:
        return &mma_kernel<8, 1, 4, 3, 2, false, true, false, kColumnUnits>();
      case 42143:
        return &mma_kernel<4, 1, 4, 3, 2, false, true, false, kColumnUnits>();
      case 82223:
        return &mma_kernel<8, 2, 2, 3, 2, false, true, false, kColumnUnits>();
      case 42124:
        return &mma_kernel<4, 1, 2, 4, 2, false, true, false, kColumnUnits>();
      case 162143:
        return &mma_kernel<16, 1, 4, 3, 2, false, true, false, kColumnUnits>();
    }
  }
  return nullptr;
}

// The kernel shapes that are compiled (see gemv_configs).
const MmaKernel& find_mma(GemvConfig c, bool swiglu, bool stamps = false, bool packed = false) {
  const int key = shape_key(c, swiglu);
  if (c.persist > 0 && packed)
    return stamps ? find_persistent<true, kPackedWeights>(key, swiglu)
                  : find_persistent<false, kPackedWeights>(key, swiglu);
  if (c.persist > 0) return stamps ? find_persistent<true>(key, swiglu) : find_persistent<false>(key, swiglu);
  if (swiglu) {
    switch (key) {
      case 83214:
        return mma_kernel<8, 2, 1, 4, 3, true>();
      case 83223:
        return mma_kernel<8, 2, 2, 3, 3, true>();
      case 82214:
        return mma_kernel<8, 2, 1, 4, 2, true>();
      case 82223:
        return mma_kernel<8, 2, 2, 3, 2, true>();
      case 42214:
        return mma_kernel<4, 2, 1, 4, 2, true>();
      case 42223:
        return mma_kernel<4, 2, 2, 3, 2, true>();
      case 162223:
        return mma_kernel<16, 2, 2, 3, 2, true>();
      case 81214:
        return mma_kernel<8, 2, 1, 4, 1, true>();
      case 81223:
        return mma_kernel<8, 2, 2, 3, 1, true>();
      case 41214:
        return mma_kernel<4, 2, 1, 4, 1, true>();
      case 41223:
        return mma_kernel<4, 2, 2, 3, 1, true>();
      case 161223:
        return mma_kernel<16, 2, 2, 3, 1, true>();
    }
  } else {
    switch (key) {
      case 83124:
        return mma_kernel<8, 1, 2, 4, 3, false>();
      case 83143:
        return mma_kernel<8, 1, 4, 3, 3, false>();
      case 83214:
        return mma_kernel<8, 2, 1, 4, 3, false>();
      case 83223:
        return mma_kernel<8, 2, 2, 3, 3, false>();
      case 82124:
        return mma_kernel<8, 1, 2, 4, 2, false>();
      case 82143:
        return mma_kernel<8, 1, 4, 3, 2, false>();
      case 82214:
        return mma_kernel<8, 2, 1, 4, 2, false>();
      case 82223:
        return mma_kernel<8, 2, 2, 3, 2, false>();
      case 42124:
        return mma_kernel<4, 1, 2, 4, 2, false>();
      case 42143:
        return mma_kernel<4, 1, 4, 3, 2, false>();
      case 42214:
        return mma_kernel<4, 2, 1, 4, 2, false>();
      case 81124:
        return mma_kernel<8, 1, 2, 4, 1, false>();
      case 81143:
        return mma_kernel<8, 1, 4, 3, 1, false>();
      case 81214:
        return mma_kernel<8, 2, 1, 4, 1, false>();
      case 81223:
        return mma_kernel<8, 2, 2, 3, 1, false>();
      case 41124:
        return mma_kernel<4, 1, 2, 4, 1, false>();
      case 41143:
        return mma_kernel<4, 1, 4, 3, 1, false>();
      case 41214:
        return mma_kernel<4, 2, 1, 4, 1, false>();
    }
  }
  fail("gemv: no kernel for warps ", c.warps, ", tiles ", c.tiles, ", unroll ", c.unroll, ", stages ",
       c.stages, ", splits ", c.splits);
}

// The kernel shape for a launch (two activation parts; resolve keeps the caller's one or two, and a third
// costs 2-10% and buys bits below the 2^-17 relative error of two): long rows (K >= 8192: down) 16 rows per
// block with 4 chunks per stage, and the rest from the sweep below (run with two parts).
GemvConfig choose_shape(int64_t rows, int64_t K, bool swiglu) {
  // From CudaLinearTest.DISABLED_BenchGemvSweep on the H200 (2026-12-01, M 1 and 4; no split-K shape won):
  // 4-warp blocks for the big SwiGLU launches (Llama-8B gate_up 73.1 -> 66.7 us, V2-Lite dense MLP 30.1 ->
  // 25.3) and the LM head; 4 chunks per stage for the small matrices (8B o 13.5 -> 11.9, V2-Lite o 6.9
  // -> 5.2, q + kv_a 8.8 -> 7.1).
  if (swiglu) {
    if (rows < 8192) return {2, 2, 3, 2, false, 8};  // V2-Lite shared experts (2816): no better shape
    return K >= 4096 ? GemvConfig{2, 2, 3, 2, false, 4} : GemvConfig{2, 1, 4, 2, false, 4};
  }
  if (K >= 8192) return {1, 4, 3, 2, false, 8};
  if (rows >= 32 * 264) return {2, 1, 4, 2, false, 4};  // LM heads: >= 2 blocks of 32 rows per SM
  if (rows >= 32 * 160) return {2, 2, 3, 2, false, 8};  // 8B qkv (6144 rows)
  return {1, 4, 3, 2, false, 8};
}

int num_sms() {
  return device_sm_count(132);
}

// Shared memory one block may use here (opt-in limit; Hopper's when it cannot be read).
int64_t smem_limit() {
  return device_smem_per_block(227 * 1024);
}

// The most dynamic shared memory a padding may add to one block of kernel k (the device's per-block limit
// less the kernel's own bytes).
int max_padding(const MmaKernel& k) {
  return static_cast<int>(std::max<int64_t>(smem_limit() - k.smem_bytes, 0));
}

// The padding that keeps kernel k at `cap` resident blocks per SM (gemv_cap_padding; 0 when none does),
// found once per (kernel, cap). The pads tried stop where the block would pass the device's per-block limit:
// counted from the kernel's own bytes, since a padding the limit refuses reads as no occupancy (an instance
// with 96 bytes of static mbarriers over gemv_block_smem's count got no cap at all, and its qkv blocks piled
// four to an SM).
int cap_padding(const MmaKernel& k, int cap) {
  static std::mutex mutex;
  static std::map<std::pair<const MmaKernel*, int>, int> pads;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(&k, cap);
  if (auto it = pads.find(key); it != pads.end()) return it->second;
  const int max_pad = max_padding(k);
  const int64_t pad =
      max_pad <= 0
          ? 0
          : gemv_cap_padding([&](int64_t p) { return k.padded_occupancy(static_cast<int>(p), max_pad); }, cap,
                             max_pad);
  pads[key] = static_cast<int>(std::max<int64_t>(pad, 0));
  return pads[key];
}

// The weight copies' L2 policy (DSINFER_GEMV_L2_EVICT_FIRST; gemv_set_weights_evict_first).
bool& weights_evict_first_switch() {
  static bool on = env_switch("DSINFER_GEMV_L2_EVICT_FIRST", true);
  return on;
}

// Paced pre-issue (DSINFER_GEMV_PREISSUE_INFLIGHT, gemv_set_preissue_inflight; 0-2, default 1): the stages a
// persistent GEMV warp keeps in flight while it issues its first stages before the PDL wait, for the launch
// roles DSINFER_GEMV_PREISSUE_ROLES names (letters; default "qasg"): q plain, a accumulating (residual), s
// SwiGLU, g MoE units gate/up, d MoE units down (not paced by default: down's launch follows gate/up's
// stream, not a latency-bound kernel, and paced it measured slower).
int& preissue_inflight_switch() {
  static int n = env_int("DSINFER_GEMV_PREISSUE_INFLIGHT", 1, 0, 2);
  return n;
}
int preissue_inflight(char role) {
  static const std::string roles = [] {
    const char* v = std::getenv("DSINFER_GEMV_PREISSUE_ROLES");
    const std::string r = v != nullptr ? v : "qasg";
    DSI_CHECK(r.find_first_not_of("qasgd") == std::string::npos,
              "DSINFER_GEMV_PREISSUE_ROLES must be letters of ",
              "\"qasgd\" (q plain, a residual, s SwiGLU, g MoE gate/up, d MoE down), got \"", r, "\"");
    return r;
  }();
  return roles.find(role) != std::string::npos ? preissue_inflight_switch() : 0;
}

// Whether the persistent kernel runs two activation parts as MMA columns up to 4 rows
// (DSINFER_GEMV_PARTS_IN_COLUMNS; gemv_set_parts_in_columns).
bool& parts_in_columns_switch() {
  static bool on = env_switch("DSINFER_GEMV_PARTS_IN_COLUMNS", true);
  return on;
}

// The auto choice runs the persistent kernel (choose_persistent_shape) unless DSINFER_GEMV_PERSISTENT=0.
bool persistent_by_default() {
  static const bool on = env_switch("DSINFER_GEMV_PERSISTENT", true);
  return on;
}

// The persistent kernel's shape for a launch (persist = 0: blocks per SM by choose_gemv_persist_blocks).
// From CudaLinearTest.DISABLED_BenchGemvSweep on the H200 (2026-12-01, M 1 and 4): the best persistent
// config of every decode launch has choose_shape's shape (so the same bits as the per-launch kernel), except
// the LM heads, where 8-warp blocks win (w8 t2 u1 s4 at 2 blocks per SM, 247 us vs 253 us at M 1 for
// Llama-8B's head). Against the per-launch kernels: 8B gate_up 66.2 -> 62.0 us, qkv 17.3 -> 16.6, o 12.2 ->
// 11.6, down 32.9 -> 32.2; V2-Lite o 5.2 -> 4.5. The model's blocks per SM match the sweep's best.
//
// Large SwiGLU launches with K >= 4096 (Llama-8B gate_up: 896 row tiles) run one 16-warp block per SM instead
// of four 4-warp blocks: the static walk then balances tiles per SM (6 or 7 of 896 / 132), where four
// blocks of 1 or 2 tiles each left SMs with 4 to 8 tiles and a ~10 us tail (GEMV stamps). H200, 8B batch 1
// (fifteenth session): gate_up's median-to-last block end 9.6 -> 5.5 us; 4.342 / 4.347 / 4.353 ms/token
// against 4.376-4.414 with four blocks. The same rule picks it for the V3 dense MLP and the larger
// Qwen2-based distills (not measured there).
GemvConfig choose_persistent_shape(int64_t rows, int64_t K, bool swiglu) {
  GemvConfig c = choose_shape(rows, K, swiglu);
  if (!swiglu && K < 8192 && rows >= 32 * 264) c = {2, 1, 4, 2, false, 8};
  if (swiglu && rows >= 8192 && K >= 4096) c = {2, 2, 3, 2, false, 16};
  c.persist = 0;
  return c;
}

// DSINFER_GEMV_SPREAD (0-2, default 1): persistent launches of at most that
// many row tiles per SM (1: no more tiles than SMs; 2: up to twice as many) run one block per SM, padded so
// that no SM takes two. Without the cap the block scheduler stacks such a launch's blocks two to an SM on the
// SMs whose shared memory split fits them (GEMV stamps, H100, sixty-first session: V2-Lite's o, 128 blocks,
// on 64-71 SMs in 79 of 81 launches, 4.2-5.9 us from its wait to its median block end; on 128 SMs
// (twice, in layer 0) 3.3-3.8 us; layer 0's dense down on 64-65 SMs, 22 us for 44.8 MB). With 1 (H200,
// sixty-second session): o on 128 SMs in every launch, median end 4.4 -> 4.0 us; V2-Lite batch 1 2.0020 ->
// 1.9761 ms/token (-1.3%); 2 measured the same as 1.
int& spread_switch() {
  static int n = env_int("DSINFER_GEMV_SPREAD", 1, 0, 2);
  return n;
}

// DSINFER_GEMV_SPLITK=N (1..kGemvMaxKSplit): the auto choice's split is N (1: never split); unset: the model
// (0); any other value is an error.
int forced_ksplit() {
  static const int n = env_int("DSINFER_GEMV_SPLITK", 0, 1, kGemvMaxKSplit);
  return n;
}

// Row tiles (blocks at split 1) of a launch in shape c.
int64_t row_tiles(const int64_t* N, int count, bool swiglu, GemvConfig c) {
  const int64_t rows_per_block = gemv_tile_rows(c, swiglu);
  int64_t tiles = 0;
  for (int i = 0; i < count; ++i) tiles += (N[i] + rows_per_block - 1) / rows_per_block;
  return tiles;
}

// The MMA shape and effective split: `requested` when it names a shape (its ksplit clamped), else the
// shape by the problem and the split by the model (or the environment).
GemvConfig resolve(int64_t M, int64_t K, const int64_t* N, int count, bool swiglu, GemvConfig c) {
  if (c.generic) {
    c.ksplit = 1;
    c.persist = 0;
    return c;
  }
  if (c.tiles != 0) {
    c.ksplit = c.persist > 0 ? 1 : gemv_split_layout(K, c.warps, c.unroll, c.ksplit).splits;
    return c;
  }
  // The activation parts the caller asked for (the auto shapes are compiled with one and two).
  const int parts = c.splits;
  DSI_CHECK(parts == 1 || parts == 2, "gemv: the auto shapes take 1 or 2 activation parts, not ", parts);
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += N[i];
  if (persistent_by_default() && forced_ksplit() <= 1) {  // a requested split runs the per-launch kernel
    // qkv-sized launches (16-row tiles in (2, 3] x SMs, K < 8192; Llama-8B's qkv: 384): one 4-warp one-tile
    // block per tile, at most 3 per SM wherever they land (padded), so no SM walks more than 3 tiles. H200,
    // 8B batch 1 (sixteenth session, as an environment switch): 4.320 / 4.332 against 4.367 / 4.362 ms/token,
    // and 4.418 against 4.467 with the fused rope + attention kernel's first version; as landed (seventeenth
    // session, stacked on the fused kernel and the warp merge): 4.220 / 4.220 against 4.240 / 4.238.
    GemvConfig one_tile{1, 4, 3, 2, false, 4};
    const int64_t tiles16 = row_tiles(N, count, false, one_tile);
    if (!swiglu && K < 8192 && tiles16 > 2 * num_sms() && tiles16 <= 3 * num_sms() &&
        gemv_shape_fits(one_tile, false, smem_limit())) {
      one_tile.persist = 3;
      one_tile.cap_per_sm = true;
      one_tile.splits = parts;
      return one_tile;
    }
    c = fit_gemv_shape(choose_persistent_shape(rows, K, swiglu), choose_shape(rows, K, swiglu), swiglu,
                       smem_limit());
    c.persist = 1;  // any positive value finds the kernel; its occupancy bounds the choice
    c.splits = parts;
    const int occupancy = find_mma(c, swiglu).blocks_per_sm;
    // Weight bytes one block has in flight: S - 1 of its S stages.
    const int64_t inflight = gemv_pipeline_smem(c.warps, gemv_mma_tiles(c, swiglu), c.unroll, c.stages) *
                             (c.stages - 1) / c.stages;
    const int64_t tiles = row_tiles(N, count, swiglu, c);
    c.persist = choose_gemv_persist_blocks(tiles, num_sms(), occupancy, inflight);
    if (gemv_spread_one_per_sm(tiles, num_sms(), occupancy, spread_switch())) {
      c.persist = 1;
      c.cap_per_sm = true;
    }
    c.ksplit = 1;
    return c;
  }
  c = choose_shape(rows, K, swiglu);
  c = fit_gemv_shape(c, c, swiglu, smem_limit());
  c.splits = parts;
  GemvSplitInput in;
  in.tiles = row_tiles(N, count, swiglu, c);
  in.rows_per_block = 16 * gemv_mma_tiles(c, swiglu);  // weight rows
  in.K = K;
  in.m_bucket = next_pow2(M);
  in.warps = c.warps;
  in.unroll = c.unroll;
  in.stages = c.stages;
  in.sms = num_sms();
  in.blocks_per_sm = find_mma(c, swiglu).blocks_per_sm;
  // Split-K only on request: the sweep found no shape where a split beat the best unsplit kernel (the model
  // in gemv_plan.h split V2-Lite's kv_a, 4.6 -> 7.3 us).
  in.forced = forced_ksplit() > 0 ? forced_ksplit() : 1;
  c.ksplit = choose_gemv_ksplit(in);
  return c;
}

// Assigns blocks to matrices and launches the MMA kernel when K and every pointer allow 16-byte loads,
// the generic kernel otherwise.
template <bool SWIGLU>
void launch(Params& p, GemvConfig c, const char* what) {
  if (p.M == 0) return;
  p.weights_evict_first = weights_evict_first_switch();
  p.preissue_inflight = preissue_inflight(SWIGLU ? 's' : p.accumulate ? 'a' : 'q');
  p.parts_in_columns = parts_in_columns_switch();
  DSI_CHECK(p.M >= 1 && p.M <= kGemvMaxRows, what, ": M = ", p.M, " rows, the GEMV takes 1..", kGemvMaxRows);
  const int mats = p.count;  // SwiGLU: 1 (up shares gate's blocks)
  bool fast = !c.generic && p.K % 8 == 0 && aligned16(p.x) && aligned16(p.norm);
  for (int i = 0; i < (SWIGLU ? 2 : p.count); ++i) fast = fast && aligned16(p.mats[i].w);
  if (fast && p.K > 0) {
    int64_t N[kGemvMaxMatrices];
    for (int i = 0; i < mats; ++i) N[i] = p.mats[i].N;
    c = resolve(p.M, p.K, N, mats, SWIGLU, c);
  }
  const int64_t rows_per_block = fast ? gemv_tile_rows(c, SWIGLU) : kWarps;
  int64_t blocks = 0;
  for (int i = 0; i < mats; ++i) {
    p.mats[i].first_block = blocks;
    blocks += (p.mats[i].N + rows_per_block - 1) / rows_per_block;
  }
  if (blocks == 0 || p.K == 0) {
    // No products: y = bias (or unchanged) is not worth a kernel path of its own; K == 0 has no caller.
    DSI_CHECK(p.K > 0 || blocks == 0, what, ": K must be positive");
    return;
  }
  DSI_CHECK(blocks < (int64_t{1} << 31), what, ": too many rows");
  if (fast && c.persist > 0) {
    // The packed copies (gemv_packed.h) when every matrix of the launch has one; bulk copies need sm_90 (the
    // Ampere path may be forced there).
    int64_t rows = 0;
    for (int i = 0; i < mats; ++i) rows += p.mats[i].N;
    bool packed = arch_path() == ArchPath::kHopper;
    p.kchunks = (p.K + 31) / 32;
    for (int i = 0; packed && i < (SWIGLU ? 2 : mats); ++i) {
      p.mats[i].packed = gemv_packed_for(p.mats[i].w, p.mats[i].N, p.K);
      packed = p.mats[i].packed != nullptr;
    }
    // Persistent: at most persist blocks per SM (and the kernel's occupancy), each walking row tiles.
    const int64_t per_sm = std::min(c.persist, find_mma(c, SWIGLU, false, packed).blocks_per_sm);
    const int64_t grid = std::min<int64_t>(blocks, num_sms() * per_sm);
    p.tiles = blocks;
    p.ksplit = 1;
    p.kcols = p.K;
    p.stamps = next_gemv_stamp_slot(rows, p.K, SWIGLU, grid, blocks);  // null unless stamps are on
    const MmaKernel& k = find_mma(c, SWIGLU, p.stamps != nullptr, packed);
    k.launch(p, dim3(static_cast<unsigned>(grid)),
             c.cap_per_sm ? cap_padding(k, static_cast<int>(per_sm)) : 0);
  } else if (fast) {
    const MmaKernel& k = find_mma(c, SWIGLU);
    GemvSplitLayout split = gemv_split_layout(p.K, c.warps, c.unroll, c.ksplit);
    if (split.splits > 1) {
      const GemvWorkspace ws =
          gemv_workspace(blocks * split.splits * slot_floats(SWIGLU ? 2 : c.tiles), blocks);
      if (!ws.partials) split = {1, p.K};  // capturing with too small a workspace: no split
      p.partials = ws.partials;
      p.counters = ws.counters;
    }
    p.ksplit = split.splits;
    p.kcols = split.columns;
    k.launch(p, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(split.splits)), 0);
  } else {
    p.ksplit = 1;
    p.kcols = p.K;
    gemv_generic_kernel<SWIGLU><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(p);
  }
  check_launch(what);
}

}  // namespace

std::vector<GemvConfig> gemv_configs(bool swiglu) {
  std::vector<GemvConfig> out;
  for (int splits : {3, 2, 1}) {
    if (swiglu) {
      out.push_back({2, 1, 4, splits, false});
      out.push_back({2, 2, 3, splits, false});
    } else {
      for (GemvConfig c :
           {GemvConfig{1, 2, 4}, GemvConfig{1, 4, 3}, GemvConfig{2, 1, 4}, GemvConfig{2, 2, 3}}) {
        c.splits = splits;
        out.push_back(c);
      }
    }
  }
  // Four warps per block (more blocks per SM, longer per-warp K loops under a split): two parts or one.
  // Sixteen (one block per SM): the large SwiGLU launches' persistent shape.
  for (int splits : {2, 1}) {
    if (swiglu) {
      out.push_back({2, 1, 4, splits, false, 4});
      out.push_back({2, 2, 3, splits, false, 4});
      out.push_back({2, 2, 3, splits, false, 16});
    } else {
      out.push_back({1, 2, 4, splits, false, 4});
      out.push_back({1, 4, 3, splits, false, 4});
      out.push_back({2, 1, 4, splits, false, 4});
    }
  }
  // The persistent kernel of every one- and two-part shape at 1, 2 and 4 blocks per SM (the last clamped to
  // the kernel's occupancy).
  const size_t plain = out.size();
  for (size_t i = 0; i < plain; ++i) {
    if (out[i].splits == 3) continue;
    for (int per_sm : {1, 2, 4}) {
      GemvConfig c = out[i];
      c.persist = per_sm;
      out.push_back(c);
    }
  }
  // The qkv-sized launches' one-tile blocks, at most 3 per SM (resolve).
  if (!swiglu) {
    for (int splits : {2, 1}) {
      GemvConfig capped{1, 4, 3, splits, false, 4};
      capped.persist = 3;
      capped.cap_per_sm = true;
      out.push_back(capped);
    }
  }
  // Only the shapes whose block fits this device's shared memory (the others cannot be launched here).
  out.erase(std::remove_if(out.begin(), out.end(),
                           [&](const GemvConfig& c) { return !gemv_shape_fits(c, swiglu, smem_limit()); }),
            out.end());
  return out;
}

GemvConfig resolve_gemv_config(int64_t M, int64_t K, const int64_t* N, int count, bool swiglu,
                               GemvConfig requested) {
  return resolve(M, K, N, count, swiglu, requested);
}

int gemv_resident_blocks_per_sm(int64_t K, const int64_t* N, int count, bool swiglu, bool packed) {
  const GemvConfig c = resolve(1, K, N, count, swiglu, GemvConfig{});
  if (c.generic || c.persist <= 0) return 0;
  const MmaKernel& k = find_mma(c, swiglu, false, packed);
  if (!c.cap_per_sm) return k.blocks_per_sm;
  const int per_sm = static_cast<int>(std::min<int64_t>(c.persist, k.blocks_per_sm));
  return k.padded_occupancy(cap_padding(k, per_sm), max_padding(k));
}

void launch_gemv(const float* x, int64_t M, int64_t K, const GemvMatrix* mats, int count, GemvNorm norm,
                 bool accumulate, GemvConfig config) {
  DSI_CHECK(count >= 1 && count <= kGemvMaxMatrices, "gemv: ", count, " matrices, at most ",
            kGemvMaxMatrices);
  Params p{};
  for (int i = 0; i < count; ++i) p.mats[i] = {mats[i].w, mats[i].bias, mats[i].y, mats[i].N, 0};
  p.count = count;
  p.x = x;
  p.M = static_cast<int>(M);
  p.K = K;
  p.norm = norm.weight;
  p.eps = norm.eps;
  p.accumulate = accumulate;
  launch<false>(p, config, "gemv");
}

void launch_gemv_swiglu(const float* x, int64_t M, int64_t K, const uint16_t* gate, const uint16_t* gate_bias,
                        const uint16_t* up, const uint16_t* up_bias, float* out, int64_t N, GemvNorm norm,
                        float limit, GemvConfig config) {
  Params p{};
  p.mats[0] = {gate, gate_bias, out, N, 0};
  p.mats[1] = {up, up_bias, out, N, 0};
  p.count = 1;  // blocks belong to gate; the kernel reads up from mats[1]
  p.x = x;
  p.M = static_cast<int>(M);
  p.K = K;
  p.norm = norm.weight;
  p.eps = norm.eps;
  p.limit = limit;
  launch<true>(p, config, "gemv_swiglu");
}

namespace {

// Whether the units launches run their 16-warp shapes (DSINFER_GEMV_UNITS_WIDE=0: resolve's; on by default).
bool units_wide() {
  static const bool on = env_switch("DSINFER_GEMV_UNITS_WIDE", true);
  return on;
}

// A units launch's shape: one 16-warp block per SM where it fits (Hopper), else what resolve gives a plain
// launch of the same rows and K. V2-Lite's down has only 128 row tiles (H 2048), so resolve's 8-warp 3-stage
// block, one per SM, keeps 64 KiB of weights in flight per SM and took 22 us for 46 MB; 16 warps keep 128
// KiB. gate/up takes the 16-warp shape Llama-8B's gate_up runs (V2-Lite: 704 row tiles, 5 or 6 per SM). H200,
// V2-Lite batch 1 (eighteenth session, one run): 2.152 ms/token against 2.367 with resolve's shapes (2.291
// with a 6-stage 8-warp down, 2.204 with the 16-warp down alone); with the landed binary 2.173 against 2.329.
//
// Tried and dropped (sixty-third session, H100s): tiles of 8 gate + 8 up rows as one MMA tile, to split
// V2-Lite's gate/up 10 or 11 tiles per SM instead of 5 or 6 (same bits): +11 to +16 us a token. In the GEMV
// stamps its median block ended later (29.2 against 25.3 us after the wait) and the tail from there to the
// last block's end stayed 3.6-4.1 us: the tile count did not set the tail (the code: 3fbecac). Down in 6
// stages of 2 chunks (160 KiB of a block's weights in flight instead of 128; a6c8c10): +37 us a token.
GemvConfig units_config(int64_t rows, int64_t K, bool swiglu) {
  if (units_wide()) {
    GemvConfig c = swiglu ? GemvConfig{2, 2, 3, 2, false, 16} : GemvConfig{1, 4, 3, 2, false, 16};
    if (gemv_shape_fits(c, swiglu, smem_limit())) {
      c.persist = 1;
      return c;
    }
  }
  return resolve(1, K, &rows, 1, swiglu, GemvConfig{});
}

bool aligned_units_base(const uint16_t* w, int64_t stride) {
  return w != nullptr && aligned16(w) && stride % 8 == 0;
}

bool& units_packed_setting() {
  static bool on = true;
  return on;
}

std::atomic<int64_t>& units_packed_count() {
  static std::atomic<int64_t> n{0};
  return n;
}

bool aligned_or_null(const uint16_t* w) {
  return w == nullptr || aligned16(w);
}

// Launches units instance k (shape c) over `rows` output rows (packed: the instance reads packed copies).
void launch_units(Params& p, GemvConfig c, const MmaKernel& k, int64_t rows, bool swiglu, const char* what,
                  bool packed = false) {
  const int64_t rows_per_block = gemv_tile_rows(c, swiglu);
  p.tiles = (rows + rows_per_block - 1) / rows_per_block;
  p.mats[0].first_block = 0;
  p.count = 1;
  p.M = 1;
  p.ksplit = 1;
  p.kcols = p.K;
  p.stamps = nullptr;
  p.weights_evict_first = weights_evict_first_switch();
  p.preissue_inflight = preissue_inflight(swiglu ? 'g' : 'd');
  p.parts_in_columns = parts_in_columns_switch();
  const int64_t per_sm = std::min(c.persist, k.blocks_per_sm);
  const int64_t grid = std::min<int64_t>(p.tiles, num_sms() * per_sm);
  // Stamped where the shape has a stamped instance (the same bits) and stamps are on.
  const MmaKernel* stamped = gemv_stamps_on() ? find_units(c, swiglu, true, packed) : nullptr;
  if (stamped) p.stamps = next_gemv_stamp_slot(rows, p.K, swiglu, grid, p.tiles);
  const MmaKernel& run = p.stamps != nullptr ? *stamped : k;
  run.launch(p, dim3(static_cast<unsigned>(grid)),
             c.cap_per_sm ? cap_padding(run, static_cast<int>(per_sm)) : 0);
  check_launch(what);
}

}  // namespace

bool gemv_moe_units_supported(const GemvMoeUnits& u, int64_t H) {
  if (u.count < 1 || u.count > kGemvMaxUnits || u.known < 0 || u.known > u.count || u.len < 128 ||
      u.len % 32 != 0 || H < 16 || H % 8 != 0 || u.count * u.len >= (int64_t{1} << 31))
    return false;
  if (u.known > 0 && !(aligned_units_base(u.shared_gate, H) && aligned_units_base(u.shared_up, H) &&
                       aligned_units_base(u.shared_down, u.known * u.len)))
    return false;
  if (u.count > u.known &&
      !(aligned_units_base(u.gate, u.gate_stride) && aligned_units_base(u.up, u.up_stride) &&
        aligned_units_base(u.down, u.down_stride) && u.experts > 0))
    return false;
  const GemvConfig gu = units_config(u.count * u.len, H, true), dn = units_config(H, u.count * u.len, false);
  return gu.persist > 0 && dn.persist > 0 && find_units(gu, true) && find_units(dn, false);
}

bool gemv_moe_units_packed_usable(const GemvMoeUnits& u, int64_t H, bool swiglu) {
  if (!units_packed_setting() || !gemv_moe_units_supported(u, H) || H % 32 != 0) return false;
  const bool shared = u.known > 0, routed = u.count > u.known;
  if (swiglu) {
    if ((shared && !(u.shared_gate_packed && u.shared_up_packed)) || (routed && !(u.gate_packed && u.up_packed)))
      return false;
    if (!aligned_or_null(u.shared_gate_packed) || !aligned_or_null(u.shared_up_packed) ||
        !aligned_or_null(u.gate_packed) || !aligned_or_null(u.up_packed))
      return false;
    return find_units(units_config(u.count * u.len, H, true), true, false, true) != nullptr;
  }
  if ((shared && !u.shared_down_packed) || (routed && !u.down_packed) || !aligned_or_null(u.shared_down_packed) ||
      !aligned_or_null(u.down_packed))
    return false;
  const GemvConfig dn = units_config(H, u.count * u.len, false);
  return u.len % (32 * dn.unroll) == 0 && H % gemv_tile_rows(dn, false) == 0 &&
         find_units(dn, false, false, true) != nullptr;
}

bool gemv_units_packed() {
  return units_packed_setting();
}

void gemv_set_units_packed(bool on) {
  units_packed_setting() = on;
}

int64_t gemv_units_packed_launches() {
  return units_packed_count().load();
}

void launch_gemv_moe_gate_up(const float* x, int64_t H, const GemvMoeUnits& u, float* act, float limit) {
  DSI_CHECK(gemv_moe_units_supported(u, H) && aligned16(x) && aligned16(act),
            "gemv_moe_gate_up: units not supported here (gemv_moe_units_supported)");
  DSI_CHECK(u.count == u.known || (u.ids && u.weights),
            "gemv_moe_gate_up: routed units without ids or weights");
  const int64_t rows = u.count * u.len;
  const GemvConfig c = units_config(rows, H, true);
  Params p{};
  p.mats[0] = {nullptr, nullptr, act, rows, 0};
  p.mats[1] = {nullptr, nullptr, act, rows, 0};
  p.x = x;
  p.K = H;
  p.limit = limit;
  p.units = {u.count,        u.known,
             u.len,          {u.shared_gate, u.shared_up},
             {u.gate, u.up}, {u.gate_stride, u.up_stride},
             u.ids,          u.weights,
             u.experts};
  if (gemv_moe_units_packed_usable(u, H, true)) {
    p.units.shared[0] = u.shared_gate_packed;
    p.units.shared[1] = u.shared_up_packed;
    p.units.routed[0] = u.gate_packed;
    p.units.routed[1] = u.up_packed;
    p.kchunks = H / 32;
    units_packed_count().fetch_add(1);
    launch_units(p, c, *find_units(c, true, false, true), rows, true, "gemv_moe_gate_up (packed)", true);
    return;
  }
  launch_units(p, c, *find_units(c, true), rows, true, "gemv_moe_gate_up");
}

void launch_gemv_moe_down(const float* act, int64_t H, const GemvMoeUnits& u, float* out, bool accumulate) {
  DSI_CHECK(gemv_moe_units_supported(u, H) && aligned16(act),
            "gemv_moe_down: units not supported here (gemv_moe_units_supported)");
  DSI_CHECK(u.count == u.known || u.ids, "gemv_moe_down: routed units without ids");
  const int64_t K = u.count * u.len;
  const GemvConfig c = units_config(H, K, false);
  Params p{};
  p.mats[0] = {nullptr, nullptr, out, H, 0};
  p.x = act;
  p.K = K;
  p.accumulate = accumulate;
  p.units = {u.count, u.known, u.len,    {u.shared_down, nullptr}, {u.down, nullptr}, {u.down_stride, 0},
             u.ids,   nullptr, u.experts};
  if (gemv_moe_units_packed_usable(u, H, false)) {
    p.units.shared[0] = u.shared_down_packed;
    p.units.routed[0] = u.down_packed;
    units_packed_count().fetch_add(1);
    launch_units(p, c, *find_units(c, false, false, true), H, false, "gemv_moe_down (packed)", true);
    return;
  }
  launch_units(p, c, *find_units(c, false), H, false, "gemv_moe_down");
}

int gemv_preissue_inflight() {
  return preissue_inflight_switch();
}

void gemv_set_preissue_inflight(int n) {
  DSI_CHECK(n >= 0 && n <= 2, "gemv_set_preissue_inflight: ", n, " stages, the GEMV takes 0..2");
  preissue_inflight_switch() = n;
}

int gemv_spread() {
  return spread_switch();
}

void gemv_set_spread(int tiles_per_sm) {
  DSI_CHECK(tiles_per_sm >= 0 && tiles_per_sm <= 2, "gemv_set_spread: ", tiles_per_sm,
            " tiles per SM, the GEMV takes 0..2");
  spread_switch() = tiles_per_sm;
}

bool gemv_parts_in_columns() {
  return parts_in_columns_switch();
}

void gemv_set_parts_in_columns(bool on) {
  parts_in_columns_switch() = on;
}

bool gemv_weights_evict_first() {
  return weights_evict_first_switch();
}

void gemv_set_weights_evict_first(bool on) {
  weights_evict_first_switch() = on;
}

}  // namespace dsinfer::cuda
