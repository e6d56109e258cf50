// The grouped expert GEMMs for many routed rows per expert (prefill, large batches): both operands bf16
// row-major in global memory (x rounded to bf16 once by launch_moe_x_bf16, the SiLU-mul output written as
// bf16), one launch per GEMM over every expert's tiles of BM permuted rows (found by binary search over the
// device tile offsets of launch_moe_permute; blocks past the last tile exit, so there is no host sync).
// A block computes BM rows x BN columns with 8 warps (2 x 4, warp tiles of BM/2 x BN/4) of mma.sync m16n8k16
// (bf16 in, fp32 accumulate; sm_80 and later), fed by ldmatrix from XOR-swizzled shared memory that a
// multi-stage cp.async pipeline fills (K steps of BK; K and N tails zero-filled). The gate/up kernel stages
// BN/2 gate and the same BN/2 up rows per block, interleaved by BN/8 so that each warp holds the gate and up
// sums of the same features and applies SiLU-mul in registers. Each output row depends only on its own
// activation row: a token's result does not depend on the other tokens of the batch. Variants 5..8 are the
// Hopper wgmma kernels of moe_wgmma_kernels.cu (their mma.sync twin on the Ampere path).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_grouped_launch.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/moe_wgmma.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;  // 8 warps: 2 along the rows x 4 along the columns
constexpr int kCastThreads = 256;

// BM rows x BN staged weight rows per block (gate/up: BN / 2 gate + the same BN / 2 up features), K steps of
// BK through kStages stages, kMinBlocks blocks per SM (the register budget).
template <int BM_, int BN_, int BK_, int kStages_, int kMinBlocks_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kWM = BM / 2, kWN = BN / 4;          // warp tile
  static constexpr int kMI = kWM / 16, kNI = kWN / 8;       // m16 / n8 fragments per warp
  static constexpr int kChunks = BK / 8;                    // 16-byte chunks per staged row
  static constexpr int kRowStep = kThreads / kChunks;       // rows apart of one thread's chunks
  static constexpr int kAChunks = BM * kChunks / kThreads;  // A chunks per thread per stage
  static constexpr int kBChunks = BN * kChunks / kThreads;  // B chunks per thread per stage
  static constexpr int kAElems = BM * BK, kStageElems = (BM + BN) * BK;
  static constexpr size_t kSmem = static_cast<size_t>(kStages) * kStageElems * 2;
  static_assert(BK == 32 || BK == 64, "the swizzle covers rows of 4 or 8 chunks");
  static_assert(BM % 32 == 0 && kAChunks >= 1 && kStages >= 2, "bad tile");
  // A thread's staged weight rows lie whole warp column groups apart (they keep gate or up) and its chunk
  // validity bits fit above bit 16.
  static_assert(kRowStep % kWN == 0 && kNI % 4 == 0 && kAChunks <= 16 && kBChunks <= 16, "bad tile");
};

// The variants (moe_kernels.h, kMoeGroupedVariants): 1-based.
using V1 = Config<128, 128, 32, 4, 2>;  // 64 KiB shared memory, 2 blocks per SM
using V2 = Config<128, 128, 64, 3, 2>;  // 96 KiB, 2 blocks per SM
using V3 = Config<64, 128, 64, 4, 2>;   // 96 KiB, 2 blocks per SM
using V4 = Config<128, 256, 32, 4, 1>;  // 96 KiB, warp tiles of 64 x 64, 1 block per SM

// 16-byte chunk index of (row, chunk) in a staged [rows][BK] bf16 tile: XOR-swizzled so that the 8 rows of
// an ldmatrix 8x8 matrix (and the chunks of a cp.async phase) fall in distinct bank groups.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  if constexpr (kChunks == 8) {
    return row * 8 + (chunk ^ (row & 7));
  } else {
    return row * 4 + (chunk ^ ((row >> 1) & 3));
  }
}

__device__ __forceinline__ void copy_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// kGateUp: a = x rounded to bf16 [T, K], row r of the tile is a[slot_pair[row0 + r] / topk]; w1 gate, w2 up
// ([N, K] per expert, N = I); out = act bf16 [pairs, N] = silu(a w1^T) * (a w2^T), grid.x = ceil(N / 64).
// Else: a = act bf16 [pairs, K] (row r is row0 + r); out = y f32 [pairs, N] = a w1^T, grid.x = ceil(N / 128).
// grid.y: an upper bound of the tiles.
template <typename C, bool kGateUp>
__global__ void __launch_bounds__(kThreads, C::kMinBlocks)
    moe_grouped_kernel(const __nv_bfloat16* a, int topk, const int32_t* offsets, const int32_t* tiles,
                       const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int E,
                       int K, int N, float limit) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  pdl_wait();
  pdl_trigger();
  ExpertTile et;
  if (!find_expert_tile(offsets, tiles, E, blockIdx.y, C::BM, &et)) return;
  const int e = et.expert, row0 = et.row0, nr = et.rows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_base = blockIdx.x * (kGateUp ? C::BN / 2 : C::BN);
  const uint32_t smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));

  // This thread's chunks: column chunk `chunk` of rows tid / kChunks + i * kRowStep. A rows are gathered
  // (element offsets from a); B rows i lie b_step elements apart. ok: bit i for A chunk i, bit 16 + i for B.
  const int chunk = tid % C::kChunks, row_first = tid / C::kChunks;
  uint32_t a_off[C::kAChunks], ok = 0;
#pragma unroll
  for (int i = 0; i < C::kAChunks; ++i) {
    const int r = row_first + i * C::kRowStep;
    const bool valid = r < nr;
    ok |= valid ? 1u << i : 0u;
    const int src = kGateUp ? slot_pair[row0 + (valid ? r : 0)] / topk : row0 + (valid ? r : 0);
    a_off[i] = static_cast<uint32_t>(src) * static_cast<uint32_t>(K) + chunk * 8;
  }
  // Gate/up: warp column group j / kWN stages gate features kWN / 2 * (j / kWN) + [0, kWN / 2) (rows
  // j % kWN < kWN / 2), then the same up ones; a thread's rows j step by kRowStep (a multiple of kWN), so
  // they keep their matrix.
  constexpr int kHalf = C::kWN / 2;
  const bool up_rows = kGateUp && row_first % C::kWN >= kHalf;
  const int f0 = kGateUp ? n_base + kHalf * (row_first / C::kWN) + row_first % kHalf : n_base + row_first;
  const int f_step = kGateUp ? kHalf * (C::kRowStep / C::kWN) : C::kRowStep;
  const __nv_bfloat16* w_e = reinterpret_cast<const __nv_bfloat16*>(up_rows ? w2.base : w1.base) +
                             e * (up_rows ? w2.stride : w1.stride);
#pragma unroll
  for (int i = 0; i < C::kBChunks; ++i) ok |= f0 + i * f_step < N ? 1u << (16 + i) : 0u;
  const __nv_bfloat16* b_src = w_e + static_cast<int64_t>(f0) * K + chunk * 8;
  const int64_t b_step = static_cast<int64_t>(f_step) * K;

  const int k_tiles = (K + C::BK - 1) / C::BK;
  auto load_stage = [&](int kt, int stage) {
    const uint32_t a_s = smem + stage * C::kStageElems * 2, b_s = a_s + C::kAElems * 2;
    const int k = kt * C::BK;
    const bool k_ok = k + chunk * 8 < K;  // K % 8 == 0: a chunk is all in or all out
    // Chunks not read (zero-filled) still name an address inside the expert's matrix or a.
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) {
      const bool valid = k_ok && (ok >> i & 1u);
      copy_async16(a_s + swizzle<C::kChunks>(row_first + i * C::kRowStep, chunk) * 16,
                   a + (valid ? a_off[i] + k : 0), valid);
    }
#pragma unroll
    for (int i = 0; i < C::kBChunks; ++i) {
      const bool valid = k_ok && (ok >> (16 + i) & 1u);
      copy_async16(b_s + swizzle<C::kChunks>(row_first + i * C::kRowStep, chunk) * 16,
                   valid ? b_src + i * b_step + k : w_e, valid);
    }
  };

  const int wm = (warp / 4) * C::kWM, wn = (warp % 4) * C::kWN;
  // m16 fragments of this warp holding real rows (a tile's last rows may be padding): the others skip.
  const int live_mi = min(C::kMI, max(0, (nr - wm + 15) / 16));
  float acc[C::kMI][C::kNI][4];
#pragma unroll
  for (int i = 0; i < C::kMI; ++i)
#pragma unroll
    for (int j = 0; j < C::kNI; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    copy_async_commit();
  }
  // ldmatrix lanes: A rows lane % 16, chunk + lane / 16; B rows lane % 8 + 8 * (lane / 16), chunk +
  // (lane / 8) % 2 (two n8 fragments per x4).
  const int a_row = wm + (lane & 15), a_chunk = lane >> 4;
  const int b_row = wn + (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    copy_async_wait<C::kStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is free to refill
    const int next = kt + C::kStages - 1;
    if (next < k_tiles) load_stage(next, next % C::kStages);
    copy_async_commit();
    const int stage = kt % C::kStages;
    const uint32_t a_s = smem + stage * C::kStageElems * 2, b_s = a_s + C::kAElems * 2;
    if (live_mi > 0) {
#pragma unroll
      for (int kk = 0; kk < C::BK / 16; ++kk) {
        uint32_t bf[C::kNI][2];
#pragma unroll
        for (int p = 0; p < C::kNI / 2; ++p) {
          uint32_t r[4];
          ldmatrix_x4(r, b_s + swizzle<C::kChunks>(b_row + 16 * p, 2 * kk + b_chunk) * 16);
          bf[2 * p][0] = r[0];
          bf[2 * p][1] = r[1];
          bf[2 * p + 1][0] = r[2];
          bf[2 * p + 1][1] = r[3];
        }
        // Every A fragment is loaded (padding rows are zeros) so that the loads are not held behind the
        // branches; only the MMAs of fragments past the tile's rows are skipped.
        uint32_t af[C::kMI][4];
#pragma unroll
        for (int i = 0; i < C::kMI; ++i)
          ldmatrix_x4(af[i], a_s + swizzle<C::kChunks>(a_row + 16 * i, 2 * kk + a_chunk) * 16);
#pragma unroll
        for (int i = 0; i < C::kMI; ++i) {
          if (i < live_mi) {
#pragma unroll
            for (int j = 0; j < C::kNI; ++j) mma_bf16(acc[i][j], af[i], bf[j]);
          }
        }
      }
    }
  }
  copy_async_wait<0>();  // nothing in flight at exit (the last groups are empty)

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < C::kMI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm + 16 * i + g + 8 * half;
      if (r >= nr) continue;
      const int64_t row = row0 + r;
      if constexpr (kGateUp) {
        // Fragments j < kNI / 2: gate features 8j + [0, 8) of the warp's kWN / 2; j + kNI / 2: the same up.
#pragma unroll
        for (int j = 0; j < C::kNI / 2; ++j) {
          const int f = n_base + C::kWN / 2 * (warp % 4) + 8 * j + 2 * t;
          if (f >= N) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float gv = acc[i][j][2 * half + c], uv = acc[i][j + C::kNI / 2][2 * half + c];
            if (limit > 0.0f) {
              gv = fminf(gv, limit);
              uv = fminf(fmaxf(uv, -limit), limit);
            }
            v[c] = gv / (1.0f + expf(-gv)) * uv;
          }
          *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(out) + row * N + f) =
              pack_bf16(v[0], v[1]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < C::kNI; ++j) {
          const int f = n_base + wn + 8 * j + 2 * t;
          if (f >= N) continue;
          *reinterpret_cast<float2*>(static_cast<float*>(out) + row * N + f) =
              make_float2(acc[i][j][2 * half], acc[i][j][2 * half + 1]);
        }
      }
    }
  }
}

// out[i] = bf16(x[i]) for n values, 8 per thread (n % 8 == 0, 16-byte aligned).
__global__ void __launch_bounds__(kCastThreads) moe_x_bf16_kernel(const float* x, uint4* out, int64_t n8) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kCastThreads + threadIdx.x;
  if (i >= n8) return;
  const float4 lo = reinterpret_cast<const float4*>(x)[2 * i],
               hi = reinterpret_cast<const float4*>(x)[2 * i + 1];
  out[i] =
      make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y), pack_bf16(hi.z, hi.w));
}

template <typename C, bool kGateUp>
void launch_config(const uint16_t* a, int topk, const int32_t* offsets, const int32_t* tiles,
                   const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int64_t pairs,
                   int64_t E, int64_t K, int64_t N, float limit) {
  launch_grouped_kernel<C, kGateUp>(moe_grouped_kernel<C, kGateUp>, kThreads,
                                    kGateUp ? "moe gate/up (grouped)" : "moe down (grouped)", a, topk,
                                    offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit);
}

template <bool kGateUp>
void launch_grouped(int variant, const uint16_t* a, int topk, const int32_t* offsets, const int32_t* tiles,
                    const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int64_t pairs,
                    int64_t E, int64_t K, int64_t N, float limit) {
  DSI_CHECK(moe_grouped_supported(K, reinterpret_cast<uintptr_t>(a), w1.base, w1.stride) &&
                (!kGateUp || moe_grouped_supported(K, 0, w2.base, w2.stride)),
            "moe_experts: operands the grouped kernel cannot take");
  if (pairs == 0 || N == 0) return;
  if (moe_wgmma_variant(variant)) {
    if (arch_path() == ArchPath::kHopper)
      return launch_moe_grouped_wgmma(variant, kGateUp, a, topk, offsets, tiles, slot_pair, w1, w2, out,
                                      pairs, E, K, N, limit);
    variant = moe_wgmma_ampere_twin(variant);  // the same tile rows
  }
  switch (variant) {
    case 1:
      return launch_config<V1, kGateUp>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 2:
      return launch_config<V2, kGateUp>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 3:
      return launch_config<V3, kGateUp>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 4:
      return launch_config<V4, kGateUp>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    default:
      fail("moe_experts: no grouped kernel variant ", variant);
  }
}

// Whether moe_grouped_variant_for picks the wgmma variants on the Hopper path: yes unless
// DSINFER_CUDA_MOE_WGMMA=0. Decided once, so eager and replayed steps agree.
bool wgmma_by_default() {
  static const bool on = env_switch("DSINFER_CUDA_MOE_WGMMA", true);
  return on;
}

}  // namespace

int moe_grouped_variant_for(int64_t rows_per_expert) {
  // DISABLED_BenchGroupedExperts / DISABLED_BenchExpertsDecodeBatch on the H200 (2026-12-01, V2-Lite experts,
  // us at T 512 / 683 / 1366 / 2731 / 8192 tokens): wgmma 64 x 128 326 / 372 / 550 / 915 / 2854, wgmma
  // 128 x 256 354 / 369 / 473 / 726 / 2314, mma.sync 64 x 128 336 / 404 / 705 / 1360 / 3859, mma.sync
  // 128 x 128 342 / 395 / 591 / 1019 / 3156.
  if (wgmma_by_default() && arch_path() == ArchPath::kHopper) return rows_per_expert <= 64 ? 7 : 6;
  // The Ampere path: up to 64 rows per expert (decode batches) one 64-row tile covers most experts, half
  // the padded MMAs of a 128-row one; above, 128 x 128 with K steps of 64.
  return rows_per_expert <= 64 ? 3 : 2;
}

int moe_grouped_tile_rows(int variant) {
  if (moe_wgmma_variant(variant)) return moe_wgmma_tile_rows(variant);
  switch (variant) {
    case 1:
      return V1::BM;
    case 2:
      return V2::BM;
    case 3:
      return V3::BM;
    case 4:
      return V4::BM;
    default:
      fail("moe_experts: no grouped kernel variant ", variant);
  }
}

bool moe_grouped_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride) {
  return K > 0 && K % 8 == 0 && a % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && stride % 8 == 0;
}

void launch_moe_x_bf16(const float* x, uint16_t* out, int64_t n) {
  DSI_CHECK(
      n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
      "moe_experts: bf16 copy of x needs 8-value aligned rows");
  if (n == 0) return;
  const int64_t n8 = n / 8;
  launch_pdl(moe_x_bf16_kernel, static_cast<unsigned>((n8 + kCastThreads - 1) / kCastThreads), kCastThreads,
             0, x, reinterpret_cast<uint4*>(out), n8);
  check_launch("moe x -> bf16");
}

void launch_moe_gate_up_grouped(int variant, const uint16_t* xb, int64_t k, const int32_t* offsets,
                                const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                                StackedWeights up, uint16_t* act, int64_t pairs, int64_t E, int64_t H,
                                int64_t I, float limit) {
  launch_grouped<true>(variant, xb, static_cast<int>(k), offsets, tiles, slot_pair, gate, up, act, pairs, E,
                       H, I, limit);
}

void launch_moe_down_grouped(int variant, const uint16_t* act, const int32_t* offsets, const int32_t* tiles,
                             StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I) {
  launch_grouped<false>(variant, act, 1, offsets, tiles, nullptr, down, StackedWeights{}, y, pairs, E, I, H,
                        0.0f);
}

}  // namespace dsinfer::cuda
