// Weight-streaming tensor-core grouped expert GEMMs for up to 64 routed rows per expert (decode and small
// prefill batches): every expert's weights are read once per tile of R = 8 * NT rows, at close to memory
// bandwidth. Same mapping as gemv_kernels.cu: y^T = W a^T on mma.m16n8k16 with A = 16 weight rows and
// B = the tile's activation rows as NT n8 column tiles; fp32 activations split into bf16 hi + lo (~16 bits
// kept). A block takes one expert tile (found by binary search over the device tile offsets of
// launch_moe_permute; blocks past the last tile exit) and FG * FW output features; its 8 warps form FG
// feature groups x KG = 8 / FG K groups. A warp streams its two m16 weight tiles (gate/up: 16 gate rows and
// the same 16 up rows; down: 32 rows) over the 32-column chunks kg, kg + KG, ... of K through a per-lane
// cp.async pipeline and reads its activation columns through L1; the K groups' partial tiles are summed in
// a fixed order through shared memory. A row's sum never depends on the other rows of its tile. Shared
// experts (MoeSharedUnits) take the first blocks of the grid: a shared unit's tile is a fixed range of
// tokens (no lookup), its weights at their own base and row stride, and it issues its first weight stages
// before the PDL wait (a routed tile needs the permutation first); the routed tiles follow.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMT = 2;      // m16 weight tiles per warp
constexpr int kStages = 4;  // cp.async stages per lane

// Feature groups per block: taller tiles re-read each activation column for fewer weight rows when more
// warps of a block share it (through L1).
template <int NT>
__host__ __device__ constexpr int feature_groups() {
  return NT >= 8 ? 4 : NT >= 4 ? 2 : 1;
}
// Output features per warp: gate/up tiles are 16 gate + 16 up rows of the same features.
template <bool kGateUp>
__host__ __device__ constexpr int features_per_warp() {
  return kGateUp ? 16 : 32;
}
// Dynamic shared memory: the weight pipeline [kWarps][kStages][kMT][2][32] uint4, reused for the partial
// tiles [kWarps][kMT][NT][4][32] float.
template <int NT>
constexpr int smem_bytes() {
  constexpr int pipe = kWarps * kStages * kMT * 2 * 32 * 16, red = kWarps * kMT * NT * 4 * 32 * 4;
  return pipe > red ? pipe : red;
}

// 16 bytes global -> shared, L2 only (weights are read once); valid == false writes zeros.
__device__ __forceinline__ void copy_async16(uint4* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// (a, b) -> bf16 pairs hi and lo (low half = a) with hi + lo ~= (a, b) to ~16 bits.
__device__ __forceinline__ void split_pair(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// The shared units of a launch as the kernel takes them (see MoeSharedUnits).
struct SharedTiles {
  StackedWeights w1, w2;
  int64_t ld;
  int units, tokens, tiles_per_unit;
  int row0;  // the first shared row of act / y (the routed pairs)
};

// kGateUp: rows of a are x[slot_pair[r] / topk] ([T, K]), out [pairs, N] = silu(a gate^T) * (a up^T) with
// w1 = gate, w2 = up; else rows of a are the permuted rows ([pairs, K]) and out = a w1^T. Shared units:
// blocks [0, units * tiles_per_unit), rows past the pairs (gate/up reads x row t for token t).
// Needs K % 8 == 0 and 16-byte aligned a, weights and strides.
template <bool kGateUp, int NT>
__global__ void __launch_bounds__(kThreads, NT >= 8 ? 1 : 2)
    moe_stream_kernel(const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                      const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int E,
                      int K, int N, float limit, SharedTiles sh) {
  constexpr int FG = feature_groups<NT>(), KG = kWarps / FG, FW = features_per_warp<kGateUp>();
  constexpr int R = 8 * NT;
  extern __shared__ uint4 smem[];
  // The block's tile: its unit (expert e of w1 / w2 with rows ld apart), first row in out, rows, and for a
  // shared gate/up tile the token of its first row (-1: routed, rows through slot_pair).
  int e, row0, nr, token0 = -1;
  int64_t ld = K;
  const int shared_blocks = sh.units * sh.tiles_per_unit;
  const bool shared_tile = static_cast<int>(blockIdx.x) < shared_blocks;
  // A routed tile comes from the permutation an earlier kernel wrote: wait first. A shared tile waits after
  // issuing its first weight loads (weights are written by no kernel), before it reads activations.
  if (!shared_tile) {
    pdl_wait();
    pdl_trigger();
  }
  if (shared_tile) {
    const int u = blockIdx.x / sh.tiles_per_unit, t0 = (blockIdx.x % sh.tiles_per_unit) * R;
    e = u;
    w1 = sh.w1;
    w2 = sh.w2;
    ld = sh.ld;
    row0 = sh.row0 + u * sh.tokens + t0;
    nr = min(R, sh.tokens - t0);
    token0 = t0;
  } else {
    ExpertTile et;
    if (!find_expert_tile(offsets, tiles, E, blockIdx.x - shared_blocks, R, &et)) return;
    e = et.expert;
    row0 = et.row0;
    nr = et.rows;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int fg = warp % FG, kg = warp / FG;
  const int f0 = (blockIdx.y * FG + fg) * FW;  // this warp's first output feature

  // Weight rows g and g + 8 of both m16 tiles (rows past N read as zeros).
  const uint16_t* wrow[kMT][2];
  bool wok[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = f0 + (kGateUp ? 0 : 16 * mt) + g + 8 * h;
      const StackedWeights& w = (kGateUp && mt == 1) ? w2 : w1;
      wok[mt][h] = n < N;
      wrow[mt][h] =
          w.base + static_cast<int64_t>(e) * w.stride + static_cast<int64_t>(wok[mt][h] ? n : 0) * ld;
    }
  }
  // Activation row g of every n8 tile (rows past the tile's end read as zeros).
  const float* arow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int m = 8 * j + g;
    arow[j] = nullptr;
    if (m < nr) {
      const int src = !kGateUp ? row0 + m : token0 >= 0 ? token0 + m : slot_pair[row0 + m] / topk;
      arow[j] = a + static_cast<int64_t>(src) * K;
    }
  }

  uint4* mine = smem + warp * (kStages * kMT * 2 * 32) + lane;
  auto slot = [&](int s, int mt, int h) { return mine + ((s * kMT + mt) * 2 + h) * 32; };
  const int chunks = (K + 31) / 32;
  const int iters = kg < chunks ? (chunks - kg + KG - 1) / KG : 0;
  auto issue = [&](int i) {
    const int s = i % kStages;
    const int k0 = (kg + i * KG) * 32 + 8 * t;
    const bool kin = k0 < K;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        copy_async16(slot(s, mt, h), wrow[mt][h] + (kin ? k0 : 0), kin && wok[mt][h]);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < iters) issue(s);
    copy_async_commit();
  }
  if (shared_tile) {
    pdl_wait();
    pdl_trigger();
  }

  // The lo parts accumulate apart from the hi parts (tensor-core fp32 accumulation keeps few bits below the
  // accumulator's exponent, so small lo products added into the large hi sums would mostly be lost); tiles
  // of 64 rows (NT 8) share one accumulator to stay within the registers.
  constexpr bool kSeparateLo = NT <= 4;
  constexpr int kLoNT = kSeparateLo ? NT : 1;
  float acc[kMT][NT][4];
  float acc_lo[kMT][kLoNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < kLoNT; ++j)
      acc_lo[mt][j][0] = acc_lo[mt][j][1] = acc_lo[mt][j][2] = acc_lo[mt][j][3] = 0.0f;
  }
  const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i = 0; i < iters; ++i) {
    if (i + kStages - 1 < iters) issue(i + kStages - 1);
    copy_async_commit();
    // Lane (g, t) takes columns [8t, 8t + 8) of the chunk: the first MMA gets 8t + {0..3}, the second
    // 8t + {4..7} (the same permutation of k for weights and activations).
    const int k0 = (kg + i * KG) * 32 + 8 * t;
    const bool kin = k0 < K;
    // Activations in groups of up to 4 n8 tiles (the first group's loads overlap the weights' wait).
    constexpr int kJB = NT < 4 ? NT : 4;
    float4 xv[kJB][2];
    auto load = [&](int jb) {
#pragma unroll
      for (int jj = 0; jj < kJB; ++jj) {
        const bool ok = kin && arow[jb + jj] != nullptr;
        xv[jj][0] = ok ? __ldg(reinterpret_cast<const float4*>(arow[jb + jj] + k0)) : zero4;
        xv[jj][1] = ok ? __ldg(reinterpret_cast<const float4*>(arow[jb + jj] + k0 + 4)) : zero4;
      }
    };
    load(0);
    copy_async_wait<kStages - 1>();
    const int s = i % kStages;
    uint4 wa[kMT], wb[kMT];  // rows g, g + 8
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      wa[mt] = *slot(s, mt, 0);
      wb[mt] = *slot(s, mt, 1);
    }
#pragma unroll
    for (int jb = 0; jb < NT; jb += kJB) {
      if (jb > 0) load(jb);
#pragma unroll
      for (int jj = 0; jj < kJB; ++jj) {
        const int j = jb + jj;
        uint32_t bh[4], bl[4];
        split_pair(xv[jj][0].x, xv[jj][0].y, bh[0], bl[0]);
        split_pair(xv[jj][0].z, xv[jj][0].w, bh[1], bl[1]);
        split_pair(xv[jj][1].x, xv[jj][1].y, bh[2], bl[2]);
        split_pair(xv[jj][1].z, xv[jj][1].w, bh[3], bl[3]);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const uint32_t a0[4] = {wa[mt].x, wb[mt].x, wa[mt].y, wb[mt].y};
          const uint32_t a1[4] = {wa[mt].z, wb[mt].z, wa[mt].w, wb[mt].w};
          const uint32_t b0h[2] = {bh[0], bh[1]}, b1h[2] = {bh[2], bh[3]};
          const uint32_t b0l[2] = {bl[0], bl[1]}, b1l[2] = {bl[2], bl[3]};
          if constexpr (kSeparateLo) {
            mma_bf16(acc_lo[mt][j], a0, b0l);
            mma_bf16(acc_lo[mt][j], a1, b1l);
          } else {
            mma_bf16(acc[mt][j], a0, b0l);
            mma_bf16(acc[mt][j], a1, b1l);
          }
          mma_bf16(acc[mt][j], a0, b0h);
          mma_bf16(acc[mt][j], a1, b1h);
        }
      }
    }
  }
  if constexpr (kSeparateLo) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mt][j][q] += acc_lo[mt][j][q];
  }
  copy_async_wait<0>();
  __syncthreads();  // every warp is done with its pipeline: the shared memory now holds partial tiles

  float* red = reinterpret_cast<float*>(smem);  // [kWarps][kMT][NT][4][32]
  auto red_at = [&](int w, int mt, int j, int q) {
    return red + (((w * kMT + mt) * NT + j) * 4 + q) * 32 + lane;
  };
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) *red_at(warp, mt, j, q) = acc[mt][j][q];
  __syncthreads();
  if (kg != 0) return;
    // Lane (g, t) holds (feature g + 8 (q >> 1), tile row 2t + (q & 1)) of every tile; K groups in order.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v[kMT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < KG; ++k) sum += *red_at(k * FG + fg, mt, j, q);
        v[mt] = sum;
      }
      const int m = 8 * j + 2 * t + (q & 1);
      if (m >= nr) continue;
      float* orow = out + static_cast<int64_t>(row0 + m) * N;
      const int n = f0 + g + 8 * (q >> 1);
      if (kGateUp) {
        if (n < N) {
          float gv = v[0], uv = v[1];
          if (limit > 0.0f) {
            gv = fminf(gv, limit);
            uv = fminf(fmaxf(uv, -limit), limit);
          }
          orow[n] = gv / (1.0f + expf(-gv)) * uv;
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
          if (n + 16 * mt < N) orow[n + 16 * mt] = v[mt];
      }
    }
  }
}

template <bool kGateUp, int NT>
void launch_nt(const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
               const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int64_t pairs,
               int64_t E, int64_t K, int64_t N, float limit, const MoeSharedUnits& shared) {
  constexpr int R = 8 * NT, features = feature_groups<NT>() * features_per_warp<kGateUp>();
  constexpr int bytes = smem_bytes<NT>();
  static const bool configured = [] {
    // More than the default 48 KiB of dynamic shared memory must be asked for (once per kernel).
    return cudaFuncSetAttribute(moe_stream_kernel<kGateUp, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                bytes) == cudaSuccess;
  }();
  if (!configured) fail("moe_experts: cannot configure ", bytes, " bytes of shared memory");
  // Every tile holds at least one row: at most min(pairs, ceil(pairs / R) + E) tiles.
  const int64_t max_tiles = std::min(pairs, (pairs + R - 1) / R + E);
  const int64_t slices = (N + features - 1) / features;
  SharedTiles sh{shared.w1, shared.w2, shared.ld, 0, 0, 1, static_cast<int>(pairs)};
  if (shared.units > 0 && shared.tokens > 0) {
    sh.units = static_cast<int>(shared.units);
    sh.tokens = static_cast<int>(shared.tokens);
    sh.tiles_per_unit = static_cast<int>((shared.tokens + R - 1) / R);
  }
  const int64_t blocks = max_tiles + int64_t{sh.units} * sh.tiles_per_unit;
  DSI_CHECK(blocks < (int64_t{1} << 31) && slices < 65536 &&
                pairs + shared.units * shared.tokens < (int64_t{1} << 31),
            "moe_experts: too many tiles");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(slices));
  launch_pdl(moe_stream_kernel<kGateUp, NT>, grid, kThreads, bytes, a, topk, offsets, tiles, slot_pair, w1,
             w2, out, static_cast<int>(E), static_cast<int>(K), static_cast<int>(N), limit, sh);
  check_launch(kGateUp ? "moe gate/up (streaming)" : "moe down (streaming)");
}

template <bool kGateUp>
void launch_stream(int tile_rows, const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                   const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int64_t pairs,
                   int64_t E, int64_t K, int64_t N, float limit, const MoeSharedUnits& sh) {
  DSI_CHECK(moe_stream_supported(K, reinterpret_cast<uintptr_t>(a), w1.base, w1.stride) &&
                (!kGateUp || moe_stream_supported(K, 0, w2.base, w2.stride)),
            "moe_experts: operands the streaming kernel cannot take");
  DSI_CHECK(sh.units == 0 || moe_stream_shared_supported(K, sh),
            "moe_experts: shared units the streaming kernel cannot take");
  if (pairs == 0 || N == 0) return;
  switch (tile_rows) {
    case 8:
      return launch_nt<kGateUp, 1>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit,
                                   sh);
    case 16:
      return launch_nt<kGateUp, 2>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit,
                                   sh);
    case 32:
      return launch_nt<kGateUp, 4>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit,
                                   sh);
    case 64:
      return launch_nt<kGateUp, 8>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit,
                                   sh);
    default:
      fail("moe_experts: ", tile_rows, " rows per streaming tile (8, 16, 32 or 64)");
  }
}

}  // namespace

int moe_stream_tile_rows(int64_t rows_per_expert) {
  // Room for the routing's spread (about one standard deviation of a Poisson count): an expert that
  // overflows its tile reads its weights once more, while padding rows only costs MMAs.
  int64_t want = rows_per_expert;
  while ((want - rows_per_expert) * (want - rows_per_expert) < rows_per_expert) ++want;
  if (want > kMoeStreamMaxRows) return 0;
  int r = 8;
  while (r < want) r *= 2;
  return r;
}

bool moe_stream_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride) {
  return K > 0 && K % 8 == 0 && a % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && stride % 8 == 0;
}

bool moe_stream_shared_supported(int64_t K, const MoeSharedUnits& s) {
  return s.units > 0 && s.tokens > 0 && s.ld >= K && s.ld % 8 == 0 && s.units < (int64_t{1} << 16) &&
         s.tokens < (int64_t{1} << 24) && moe_stream_supported(K, 0, s.w1.base, s.w1.stride) &&
         (!s.w2.base || moe_stream_supported(K, 0, s.w2.base, s.w2.stride));
}

void launch_moe_gate_up_stream(int tile_rows, const float* x, int64_t k, const int32_t* offsets,
                               const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                               StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                               float limit, const MoeSharedUnits& shared) {
  DSI_CHECK(shared.units == 0 || shared.w2.base, "moe_experts: shared units without up weights");
  launch_stream<true>(tile_rows, x, static_cast<int>(k), offsets, tiles, slot_pair, gate, up, act, pairs, E,
                      H, I, limit, shared);
}

void launch_moe_down_stream(int tile_rows, const float* act, const int32_t* offsets, const int32_t* tiles,
                            StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I,
                            const MoeSharedUnits& shared) {
  launch_stream<false>(tile_rows, act, 1, offsets, tiles, nullptr, down, StackedWeights{}, y, pairs, E, I, H,
                       0.0f, shared);
}

}  // namespace dsinfer::cuda
