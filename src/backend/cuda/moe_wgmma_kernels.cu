// The grouped expert GEMMs on Hopper tensor cores (moe_wgmma.h): the operands, tiles and outputs of
// moe_grouped_kernels.cu (bf16 a and weights, one launch over every expert's tiles of BM permuted rows found
// by binary search over the device tile offsets, gate/up with SiLU-mul into bf16 act, down into fp32 y), but
// each warpgroup (128 threads) computes 64 rows x BN columns with wgmma.mma_async m64n128k16 (bf16 in, fp32
// accumulators in registers), both operands read from shared memory through matrix descriptors.
//
// Shared memory: per stage an A tile [BM][64] and a B tile [BN][64] of bf16, every row one 128-byte line
// whose 16-byte chunk c sits at c ^ (row % 8): the K-major 128-byte-swizzle layout of the PTX ISA (8-row
// atoms of 1024 bytes, stride byte offset 1024, tile bases 1024-byte aligned), so a descriptor names any 64-
// or 128-row slice and the k16 step kk by adding 32 * kk bytes to its start address. A cp.async pipeline
// (16-byte copies, zero-filled K tails, N tails and padding rows; A rows gathered through slot_pair for
// gate/up) fills kStages stages kStages - 2 k steps ahead; one wgmma group stays in flight while the next
// stage is issued (wait_group 1), so a stage is refilled only after every warpgroup waited for the MMAs that
// read it (the barrier of the next step). fence.proxy.async orders the cp.async (generic proxy) writes before
// the wgmma (async proxy) reads.
//
// Gate/up: B rows [0, BN/2) are gate features n_base + r, rows [BN/2, BN) the same up features, so each
// thread holds gate and up of the same (row, feature) and applies SiLU-mul in registers. Accumulator
// fragment of m64nNk16 (f32): warp w of the warpgroup owns rows 16w + lane/4 (+8 for registers 2, 3 of each
// group of 4), register i columns 8 (i / 4) + 2 (lane % 4) + i % 2. Each output row depends only on its own
// activation row: a token's result does not depend on the other tokens of the batch.
//
// sm_90a only: in the sm_80 cubin the wgmma instructions trap (the host launches these variants only on the
// Hopper path).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_grouped_launch.cuh"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/moe_wgmma.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/wgmma_common.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using namespace wgmma;

constexpr int kBK = 64;             // K step: bf16 per staged row
constexpr int kRowBytes = kBK * 2;  // one 128-byte swizzle line per row

// BM rows (BM / 64 warpgroups) x BN staged weight rows per block (gate/up: BN / 2 gate + the same BN / 2 up
// features), kStages stages, kMinBlocks blocks per SM.
template <int BM_, int BN_, int kStages_, int kMinBlocks_>
struct WgConfig {
  static constexpr int BM = BM_, BN = BN_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = BM * 2;         // 128 threads per 64 rows
  static constexpr int kRowStep = kThreads / 8;   // rows apart of one thread's chunks (8 chunks per row)
  static constexpr int kAChunks = BM / kRowStep;  // A chunks per thread per stage (4)
  static constexpr int kBChunks = BN / kRowStep;  // B chunks per thread per stage
  static constexpr int kHalfChunks = kBChunks / 2;
  static constexpr int kABytes = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  static constexpr int kPrefetch = kStages - 2;  // k steps loaded ahead of the one computed
  static constexpr int kAcc = BN / 2;            // fp32 accumulators per thread (64 x BN per warpgroup)
  static constexpr size_t kSmem = static_cast<size_t>(kStages) * kStageBytes + 1024;  // + alignment slack
  static_assert(BM % 64 == 0 && BN % 128 == 0 && kStages >= 3, "bad tile");
  // A thread's staged weight rows keep gate or up; chunk validity bits: A 0..3, B from bit 8.
  static_assert(kAChunks == 4 && (BN / 2) % kRowStep == 0 && kBChunks <= 24, "bad tile");
};

using W5 = WgConfig<128, 128, 4, 1>;
using W6 = WgConfig<128, 256, 4, 1>;
using W7 = WgConfig<64, 128, 4, 2>;
using W8 = WgConfig<128, 128, 3, 2>;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// kGateUp: a = x rounded to bf16 [T, K], row r of the tile is a[slot_pair[row0 + r] / topk]; w1 gate, w2 up
// ([N, K] per expert, N = I); out = act bf16 [pairs, N], grid.x = ceil(N / (BN / 2)). Else: a = act bf16
// [pairs, K] (row r is row0 + r); out = y f32 [pairs, N] = a w1^T, grid.x = ceil(N / BN). grid.y: an upper
// bound of the tiles.
template <typename C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    moe_wgmma_kernel(const __nv_bfloat16* a, int topk, const int32_t* offsets, const int32_t* tiles,
                     const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int E, int K,
                     int N, float limit) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  pdl_wait();
  pdl_trigger();
  ExpertTile et;
  if (!find_expert_tile(offsets, tiles, E, blockIdx.y, C::BM, &et)) return;
  const int e = et.expert, row0 = et.row0, nr = et.rows;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int n_base = blockIdx.x * (kGateUp ? C::BN / 2 : C::BN);
  // Swizzle atoms need 1024-byte aligned tiles (kSmem holds the slack).
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;

  // This thread's chunks: column chunk `chunk` of rows row_first + i * kRowStep. A rows are gathered
  // (element offsets from a); ok: bit i for A chunk i, bit 8 + i for B chunk i.
  const int chunk = tid % 8, row_first = tid / 8;
  uint32_t a_off[C::kAChunks], ok = 0;
#pragma unroll
  for (int i = 0; i < C::kAChunks; ++i) {
    const int r = row_first + i * C::kRowStep;
    const bool valid = r < nr;
    ok |= valid ? 1u << i : 0u;
    const int src = kGateUp ? slot_pair[row0 + (valid ? r : 0)] / topk : row0 + (valid ? r : 0);
    a_off[i] = static_cast<uint32_t>(src) * static_cast<uint32_t>(K) + chunk * 8;
  }
  // B row r = row_first + i * kRowStep. Gate/up: chunks i < kHalfChunks are gate rows (feature n_base + r),
  // the others the up rows of the same features; down: feature n_base + r.
  const int f0 = n_base + row_first;
#pragma unroll
  for (int i = 0; i < C::kBChunks; ++i) {
    const int f = f0 + (kGateUp ? i % C::kHalfChunks : i) * C::kRowStep;
    ok |= f < N ? 1u << (8 + i) : 0u;
  }
  const __nv_bfloat16* w_gate = reinterpret_cast<const __nv_bfloat16*>(w1.base) + e * w1.stride;
  const __nv_bfloat16* w_up =
      kGateUp ? reinterpret_cast<const __nv_bfloat16*>(w2.base) + e * w2.stride : w_gate;
  const int64_t b_first = static_cast<int64_t>(f0) * K + chunk * 8;
  const int64_t b_step = static_cast<int64_t>(C::kRowStep) * K;

  const int k_tiles = (K + kBK - 1) / kBK;
  auto load_stage = [&](int kt, int stage) {
    const uint32_t a_s = smem + stage * C::kStageBytes, b_s = a_s + C::kABytes;
    const int k = kt * kBK;
    const bool k_ok = k + chunk * 8 < K;  // K % 8 == 0: a chunk is all in or all out
    // Chunks not read (zero-filled) still name an address inside the expert's matrix or a.
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) {
      const bool valid = k_ok && (ok >> i & 1u);
      copy_async16(a_s + swizzled128(row_first + i * C::kRowStep, chunk), a + (valid ? a_off[i] + k : 0),
                   valid);
    }
#pragma unroll
    for (int i = 0; i < C::kBChunks; ++i) {
      const bool valid = k_ok && (ok >> (8 + i) & 1u);
      const bool up = kGateUp && i >= C::kHalfChunks;
      const __nv_bfloat16* src =
          (up ? w_up : w_gate) + b_first + (kGateUp ? i % C::kHalfChunks : i) * b_step + k;
      copy_async16(b_s + swizzled128(row_first + i * C::kRowStep, chunk), valid ? src : w_gate, valid);
    }
  };

  float acc[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
  // A warpgroup whose 64 rows are all padding issues no MMAs (warpgroup-uniform).
  const bool live = wg * 64 < nr;

#pragma unroll
  for (int s = 0; s < C::kPrefetch; ++s) {
    if (s < k_tiles) load_stage(s, s);
    copy_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    copy_async_wait<C::kPrefetch - 1>();  // this thread's copies of k step kt landed
    fence_proxy_async();                  // ... and are visible to the async proxy (wgmma)
    // Every thread's copies of stage kt landed; every warpgroup finished the MMAs of step kt - 2, whose
    // stage the loads below refill.
    __syncthreads();
    const uint32_t stage_s = smem + (kt % C::kStages) * C::kStageBytes;
    if (live) {
      const uint32_t a_s = stage_s + wg * 64 * kRowBytes, b_s = stage_s + C::kABytes;
#pragma unroll
      for (int i = 0; i < C::kAcc; ++i) fence_operand(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
        for (int nb = 0; nb < C::BN / 128; ++nb)
          wgmma_m64n128k16(acc + 64 * nb, smem_desc(a_s + 32 * kk),
                           smem_desc(b_s + nb * 128 * kRowBytes + 32 * kk));
      }
      wgmma_commit();
#pragma unroll
      for (int i = 0; i < C::kAcc; ++i) fence_operand(acc[i]);
    }
    const int next = kt + C::kPrefetch;
    if (next < k_tiles) load_stage(next, next % C::kStages);
    copy_async_commit();
    wgmma_wait<1>();  // the MMAs of step kt - 1 are done (those of kt may still run)
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) fence_operand(acc[i]);
  copy_async_wait<0>();  // nothing in flight at exit (the last groups are empty)

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = wg * 64 + warp * 16 + g + 8 * half;
    if (r >= nr) continue;
    const int64_t row = row0 + r;
    if constexpr (kGateUp) {
      // n8 block j < BN / 16: gate features n_base + 8j + [0, 8); j + BN / 16: the same up ones.
#pragma unroll
      for (int j = 0; j < C::BN / 16; ++j) {
        const int f = n_base + 8 * j + 2 * t;
        if (f >= N) continue;
        float v[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float gv = acc[4 * j + 2 * half + c], uv = acc[4 * (j + C::BN / 16) + 2 * half + c];
          if (limit > 0.0f) {
            gv = fminf(gv, limit);
            uv = fminf(fmaxf(uv, -limit), limit);
          }
          v[c] = gv / (1.0f + expf(-gv)) * uv;
        }
        *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(out) + row * N + f) = pack_bf16(v[0], v[1]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < C::BN / 8; ++j) {
        const int f = n_base + 8 * j + 2 * t;
        if (f >= N) continue;
        *reinterpret_cast<float2*>(static_cast<float*>(out) + row * N + f) =
            make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
      }
    }
  }
}

template <typename C, bool kGateUp>
void launch_config(const uint16_t* a, int topk, const int32_t* offsets, const int32_t* tiles,
                   const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int64_t pairs,
                   int64_t E, int64_t K, int64_t N, float limit) {
  launch_grouped_kernel<C, kGateUp>(moe_wgmma_kernel<C, kGateUp>, C::kThreads,
                                    kGateUp ? "moe gate/up (grouped wgmma)" : "moe down (grouped wgmma)", a,
                                    topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit);
}

template <typename C>
void launch_variant(bool gate_up, const uint16_t* a, int topk, const int32_t* offsets, const int32_t* tiles,
                    const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, void* out, int64_t pairs,
                    int64_t E, int64_t K, int64_t N, float limit) {
  if (gate_up) {
    launch_config<C, true>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit);
  } else {
    launch_config<C, false>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N, limit);
  }
}

}  // namespace

int moe_wgmma_tile_rows(int variant) {
  switch (variant) {
    case 5:
      return W5::BM;
    case 6:
      return W6::BM;
    case 7:
      return W7::BM;
    case 8:
      return W8::BM;
    default:
      fail("moe_experts: no wgmma grouped kernel variant ", variant);
  }
}

int moe_wgmma_ampere_twin(int variant) {
  // mma.sync variants 2 (128 x 128, K steps of 64) and 3 (64 x 128).
  return moe_wgmma_tile_rows(variant) == 64 ? 3 : 2;
}

void launch_moe_grouped_wgmma(int variant, bool gate_up, const uint16_t* a, int topk, const int32_t* offsets,
                              const int32_t* tiles, const int32_t* slot_pair, StackedWeights w1,
                              StackedWeights w2, void* out, int64_t pairs, int64_t E, int64_t K, int64_t N,
                              float limit) {
  switch (variant) {
    case 5:
      return launch_variant<W5>(gate_up, a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                limit);
    case 6:
      return launch_variant<W6>(gate_up, a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                limit);
    case 7:
      return launch_variant<W7>(gate_up, a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                limit);
    case 8:
      return launch_variant<W8>(gate_up, a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                limit);
    default:
      fail("moe_experts: no wgmma grouped kernel variant ", variant);
  }
}

}  // namespace dsinfer::cuda
