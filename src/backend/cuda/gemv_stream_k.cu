// Stream-K GEMV (see gemv_stream_k.h). The work of a launch is the list of iterations (tile, i): tile = 16
// (SwiGLU: 16 gate + 16 up) or 32 weight rows, i = a slice of kWarps * 32 * U columns of K, tile-major.
// Block b of G takes iterations [b W / G, (b + 1) W / G) of the W in all, so every block streams the same
// bytes (to one iteration) whatever the number of tiles, and each warp keeps S - 1 stages of the next
// iterations in flight across tile boundaries. Within an iteration warp w takes columns [32 U w, 32 U (w +
// 1)) of the slice, with the MMA layout of gemv_kernels.cu. At the end of its part of a tile (a segment) the
// block sums its warps' accumulators in shared memory (double-buffered, one barrier) and warp 0 finishes:
// a tile covered by one block is written out directly; otherwise each segment's partial goes to a device
// slot, and the last block to arrive (a per-tile counter, reset by that block so CUDA graph replays start
// from zero) adds the partials in block order and writes the output. The RMSNorm's sum of squares covers
// all of K, so every block computes it over the whole of x first (x is at most 8 x K floats, an L2 read).
// Per row, the summation order depends on N, K, the kernel shape and the grid, never on M.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/gemv_stream_k.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda::gemv {

namespace {

constexpr int kMaxGrid = 1024;                // blocks of one launch at most
constexpr int kMaxTiles = 2;                  // 16-row MMA tiles per iteration at most
constexpr int kPartial = kMaxTiles * 4 * 32;  // floats of one segment's partial sums

// Arrivals per split tile, indexed by the tile's first block (only one split tile starts in a block);
// zero between launches (the last arriving block resets it).
__device__ unsigned g_arrivals[kMaxGrid];
// Partial sums per block: [2 b] its first segment, [2 b + 1] its last one when that is another tile.
// Layout as the shared reduction: [tile j * 4 + value q][lane].
__device__ float g_partials[2 * kMaxGrid][kPartial];

// The division of a launch's work.
struct Work {
  int64_t iters;  // I: iterations per tile
  int64_t total;  // W = tiles * I
};

// First iteration of block b of G.
__device__ __forceinline__ int64_t block_start(int64_t b, int64_t W, int64_t G) {
  return b * W / G;
}
// The block whose range holds iteration j: the largest b with b W / G <= j.
__device__ __forceinline__ int64_t iteration_owner(int64_t j, int64_t W, int64_t G) {
  return ((j + 1) * G - 1) / W;
}
// Block b's partial slot for the tile whose first iteration is `first`.
__device__ __forceinline__ int64_t partial_slot(int64_t b, int64_t first, int64_t W, int64_t G) {
  return 2 * b + (block_start(b, W, G) < first ? 1 : 0);
}

// Warp 0 of block b finishes its segment of `tile`: red [kWarps][TILES * 4][32] holds the warps' sums,
// ssq [kGemvMaxRows][kWarps] the per-warp sums of squares of x's rows.
template <int TILES, bool SWIGLU>
__device__ void finish_segment(const Params& p, const Work& wk, const float (*red)[TILES * 4][32],
                               const float (*ssq)[kWarps], int64_t tile, int64_t b, int lane) {
  const int g = lane / 4, t = lane % 4;
  float v[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s += red[w][j * 4 + q][lane];
      v[j][q] = s;
    }
  const int64_t W = wk.total, G = gridDim.x;
  const int64_t first = tile * wk.iters;
  const int64_t b0 = iteration_owner(first, W, G), b1 = iteration_owner(first + wk.iters - 1, W, G);
  if (b0 != b1) {
    float* mine = g_partials[partial_slot(b, first, W, G)];
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) __stcg(mine + (j * 4 + q) * 32 + lane, v[j][q]);
    __threadfence();
    __syncwarp();
    unsigned arrived = 0;
    if (lane == 0) arrived = atomicAdd(&g_arrivals[b0], 1u);
    arrived = __shfl_sync(0xffffffffu, arrived, 0);
    if (arrived != static_cast<unsigned>(b1 - b0)) return;  // not the last segment to arrive
    __threadfence();
    for (int64_t s = b0; s <= b1; ++s) {
      const float* part = g_partials[partial_slot(s, first, W, G)];
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float pv = __ldcg(part + (j * 4 + q) * 32 + lane);
          v[j][q] = s == b0 ? pv : v[j][q] + pv;
        }
    }
    if (lane == 0) g_arrivals[b0] = 0;
  }
  int64_t local = 0;
  const MatDesc d = block_matrix(p, tile, local);
  const int64_t row0 = local * (SWIGLU ? 16 : 16 * TILES);
  // Lane (g, t) holds outputs (row g, m = 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of each tile.
  float inv[2] = {1.0f, 1.0f};
  if (p.norm) {
    for (int q = 0; q < 2; ++q) {
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s += ssq[2 * t + q][w];
      inv[q] = rsqrtf(s / static_cast<float>(p.K) + p.eps);
    }
  }
#pragma unroll
  for (int j = 0; j < (SWIGLU ? 1 : TILES); ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int m = 2 * t + (q & 1);
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * (q >> 1);
      if (m < p.M && n < d.N)
        store_output<SWIGLU>(p, d, m, n, v[j][q], SWIGLU ? v[TILES - 1][q] : 0.0f, inv[q & 1]);
    }
}

// Shared memory of the weight pipeline: per warp S stages of U chunks x TILES tiles x rows (g, g + 8) x 32
// lanes x 16 bytes.
constexpr int pipeline_bytes(int tiles, int unroll, int stages) {
  return kWarps * stages * unroll * tiles * 2 * 32 * 16;
}

template <int TILES, int U, int S, int SPLITS, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, 2) gemv_stream_k_kernel(const Params p, const Work wk) {
  static_assert(TILES <= kMaxTiles && (!SWIGLU || TILES == 2), "tiles per iteration");
  extern __shared__ uint4 pipe[];                  // [kWarps][S][U][TILES][2][32]
  __shared__ float red[2][kWarps][TILES * 4][32];  // warps' sums, two segments in flight
  __shared__ float ssq[kGemvMaxRows][kWarps];      // sums of squares of x's rows per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K, I = wk.iters, W = wk.total, G = gridDim.x, b = blockIdx.x;
  const int64_t j0 = block_start(b, W, G), j1 = block_start(b + 1, W, G);
  constexpr int64_t kRows = SWIGLU ? 16 : 16 * TILES;                    // weight rows per tile (and matrix)
  constexpr int64_t kStep = kWarps * 32 * U;                             // columns per iteration
  const int64_t lane_col = static_cast<int64_t>(warp) * 32 * U + 8 * t;  // in the iteration's slice
  uint4* mine = pipe + static_cast<int64_t>(warp) * S * U * TILES * 2 * 32 + lane;
  auto slot = [&](int s, int u, int j, int h) { return mine + (((s * U + u) * TILES + j) * 2 + h) * 32; };

  // Copies iteration j's weights (rows g and g + 8 of every tile; rows past N and columns past K as zeros).
  auto issue = [&](int64_t j) {
    const int64_t tile = j / I, i = j - tile * I;
    int64_t local = 0;
    const MatDesc d = block_matrix(p, tile, local);
    const int64_t row0 = local * kRows;
    const int s = static_cast<int>((j - j0) % S);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = i * kStep + lane_col + 32 * u;
#pragma unroll
      for (int jt = 0; jt < TILES; ++jt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t n = row0 + (SWIGLU ? 0 : 16 * jt) + g + 8 * h;
          const bool ok = k0 < K && n < d.N;
          const uint16_t* base = SWIGLU ? p.mats[jt].w : d.w;
          copy_async16(slot(s, u, jt, h), base + (ok ? n * K + k0 : 0), ok);
        }
    }
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (j0 + s < j1) issue(j0 + s);
    copy_async_commit();
  }

  // Sums of squares of every row of x over all of K while the first stages land (the same order in
  // every block, so every block scales by the same inv-RMS).
  const bool has_norm = p.norm != nullptr;
  if (has_norm) {
#pragma unroll
    for (int m = 0; m < kGemvMaxRows; ++m) {
      float s = 0.0f;
      if (m < p.M) {
        const float* xr = p.x + m * K;
        for (int64_t k = 4 * static_cast<int64_t>(threadIdx.x); k < K; k += 4 * kThreads) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(xr + k));
          s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
      }
      for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) ssq[m][warp] = s;
    }
  }

  float acc[TILES][SPLITS][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int l = 0; l < SPLITS; ++l) acc[j][l][0] = acc[j][l][1] = acc[j][l][2] = acc[j][l][3] = 0.0f;
  const bool xok = g < p.M;
  const float* xrow = p.x + (xok ? g : 0) * K;
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  int64_t tile = j0 / I, i = j0 - tile * I;
  int buf = 0;
  for (int64_t j = j0; j < j1; ++j) {
    if (j + S - 1 < j1) issue(j + S - 1);
    copy_async_commit();
    float4 xv[U][2];
    uint4 nv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = i * kStep + lane_col + 32 * u;
      const bool xin = k0 < K && xok;
      xv[u][0] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0)) : make_float4(0, 0, 0, 0);
      xv[u][1] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0 + 4)) : make_float4(0, 0, 0, 0);
      nv[u] = (k0 < K && has_norm) ? __ldg(reinterpret_cast<const uint4*>(p.norm + k0)) : zero4;
    }
    copy_async_wait<S - 1>();
    const int s = static_cast<int>((j - j0) % S);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint32_t bp[4][SPLITS];  // pair e = (x[2e], x[2e + 1]), part l
      chunk_activations<SPLITS>(xv[u][0], xv[u][1], nv[u], has_norm, nullptr, bp);
#pragma unroll
      for (int jt = 0; jt < TILES; ++jt) {
        const uint4 a = *slot(s, u, jt, 0), c = *slot(s, u, jt, 1);  // rows g, g + 8
#pragma unroll
        for (int l = 0; l < SPLITS; ++l) {
          mma(acc[jt][l], a.x, c.x, a.y, c.y, bp[0][l], bp[1][l]);
          mma(acc[jt][l], a.z, c.z, a.w, c.w, bp[2][l], bp[3][l]);
        }
      }
    }
    ++i;
    if (i == I || j + 1 == j1) {
      // End of this block's segment of the tile: the warps' sums (smallest part first) to shared memory.
#pragma unroll
      for (int jt = 0; jt < TILES; ++jt)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float sum = acc[jt][SPLITS - 1][q];
#pragma unroll
          for (int l = SPLITS - 2; l >= 0; --l) sum += acc[jt][l][q];
          red[buf][warp][jt * 4 + q][lane] = sum;
#pragma unroll
          for (int l = 0; l < SPLITS; ++l) acc[jt][l][q] = 0.0f;
        }
      // One barrier per segment: red[buf] is written again two segments later, after the next barrier,
      // which warp 0 reaches only once it has finished this one.
      __syncthreads();
      if (warp == 0) finish_segment<TILES, SWIGLU>(p, wk, red[buf], ssq, tile, b, lane);
      buf ^= 1;
      if (i == I) {
        ++tile;
        i = 0;
      }
    }
  }
  copy_async_wait<0>();
}

int num_sms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 108;
    }
    return v;
  }();
  return n;
}

template <int TILES, int U, int S, int SPLITS, bool SWIGLU>
void launch_kernel(const Params& p, int64_t tiles, int blocks_per_sm) {
  constexpr int bytes = pipeline_bytes(TILES, U, S);
  auto* kernel = gemv_stream_k_kernel<TILES, U, S, SPLITS, SWIGLU>;
  // More than the default 48 KiB of dynamic shared memory must be asked for (once per kernel); the blocks
  // one SM holds follow from it (2 on sm_80/sm_90, 1 where shared memory is smaller).
  static const int resident = [kernel] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)
      return 0;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, bytes) != cudaSuccess) return 0;
    return n;
  }();
  if (resident <= 0) {
    cudaGetLastError();
    fail("gemv stream-K: cannot run with ", bytes, " bytes of shared memory");
  }
  Work wk{};
  wk.iters = (p.K + (kWarps * 32 * U) - 1) / (kWarps * 32 * U);
  wk.total = tiles * wk.iters;
  const int64_t per_sm = std::max(1, std::min(blocks_per_sm, resident));
  const int64_t grid = std::min<int64_t>({wk.total, per_sm * num_sms(), kMaxGrid});
  kernel<<<static_cast<unsigned>(grid), kThreads, bytes, stream()>>>(p, wk);
}

}  // namespace

void launch_stream_k(const Params& p, int64_t tiles, GemvConfig c, bool swiglu) {
  const int key = c.splits * 1000 + (swiglu ? 2 : c.tiles) * 100 + c.unroll * 10 + c.stages;
  const int bps = c.blocks_per_sm;
  if (swiglu) {
    switch (key) {
      case 2214:
        return launch_kernel<2, 1, 4, 2, true>(p, tiles, bps);
      case 3214:
        return launch_kernel<2, 1, 4, 3, true>(p, tiles, bps);
    }
  } else {
    switch (key) {
      case 2214:
        return launch_kernel<2, 1, 4, 2, false>(p, tiles, bps);
      case 2124:
        return launch_kernel<1, 2, 4, 2, false>(p, tiles, bps);
      case 3214:
        return launch_kernel<2, 1, 4, 3, false>(p, tiles, bps);
      case 3124:
        return launch_kernel<1, 2, 4, 3, false>(p, tiles, bps);
    }
  }
  fail("gemv stream-K: no kernel for tiles ", c.tiles, ", unroll ", c.unroll, ", stages ", c.stages,
       ", splits ", c.splits);
}

std::vector<GemvConfig> stream_k_configs(bool swiglu) {
  std::vector<GemvConfig> out;
  for (int splits : {2, 3}) {
    for (GemvConfig c :
         swiglu ? std::vector<GemvConfig>{{2, 1, 4}} : std::vector<GemvConfig>{{2, 1, 4}, {1, 2, 4}}) {
      c.splits = splits;
      c.stream_k = true;
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace dsinfer::cuda::gemv
