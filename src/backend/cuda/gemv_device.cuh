// Device pieces the decode GEMV kernels share (gemv_kernels.cu's per-launch kernel and
// gemv_persistent.cuh's persistent one), so both compute a row tile with the same instructions in the same
// order: the launch parameters, the cp.async weight copies, the activation split into bf16 parts, one
// pipeline stage's MMAs and the epilogue. Included by gemv_kernels.cu only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/weight_l2_policy.cuh"

namespace dsinfer::cuda::gemv_detail {

// A launch's matrices as the kernels see them: row tile b belongs to the last matrix whose first tile
// (`first_block`) is <= b.
struct MatDesc {
  const uint16_t* w;
  const uint16_t* bias;
  float* y;
  int64_t N;
  int64_t first_block;
  const uint16_t* packed;  // the kPackedWeights instances: w's copy in gemv_packed.h's layout
};

// One token's MoE experts as a persistent launch (gemv_persistent.cuh's UNITS instances): `count` units of
// `len` rows (kRowUnits: the SwiGLU gate/up rows [u len, (u + 1) len) of the launch, row stride K) or columns
// (kColumnUnits: down's columns [u len, (u + 1) len) of K). Unit u < known is slice u of the shared experts'
// matrices, whose addresses the host knows; unit u >= known is routed expert ids[u - known] of the stacked
// matrices, read after the PDL wait (an id outside [0, experts) reads expert 0 and its unit's outputs are
// zeros, as the permutation drops such pairs). Column units' row stride: known * len (shared), len (routed).
// kPackedRowUnits / kPackedColumnUnits: the same units read from the matrices' packed copies (gemv_packed.h's
// layout; UnitParams' bases and strides are then the packed copies', which equal the row-major offsets at row
// groups when K, resp. len, is a multiple of 32), each warp stage one bulk copy per tile.
inline constexpr int kRowUnits = 1;
inline constexpr int64_t kGemvUnitTableBytes = kGemvMaxUnits * (2 * sizeof(void*) + sizeof(int64_t));
inline constexpr int kColumnUnits = 2;
inline constexpr int kPackedWeights = 3;  // not units: the persistent kernel reading packed weights
inline constexpr int kPackedRowUnits = 4;
inline constexpr int kPackedColumnUnits = 5;
__host__ __device__ constexpr bool row_units(int units) {
  return units == kRowUnits || units == kPackedRowUnits;
}
__host__ __device__ constexpr bool column_units(int units) {
  return units == kColumnUnits || units == kPackedColumnUnits;
}
__host__ __device__ constexpr bool packed_weights(int units) {
  return units == kPackedWeights || units == kPackedRowUnits || units == kPackedColumnUnits;
}
struct UnitParams {
  int count;
  int known;
  int64_t len;
  const uint16_t*
      shared[2];  // row units: the shared gate and up [known len, K]; column units: down [N, known len]
  const uint16_t* routed[2];  // the stacked experts: expert e's matrix i at routed[i] + e * stride[i]
  int64_t stride[2];
  const int32_t* ids;  // [count - known] routed experts (device); ids outside [0, experts) add nothing
  const float* scale;  // row units: [count - known] factors of the routed units' outputs (device)
  int experts;         // experts in the stacked matrices
};

struct Params {
  MatDesc mats[kGemvMaxMatrices];  // SwiGLU: [0] gate (y = out), [1] up
  int count;                       // matrices that own blocks (SwiGLU: 1)
  const float* x;                  // [M, K]
  int M;
  int64_t K;
  const uint16_t* norm;  // [K] or null
  float eps;
  bool accumulate;
  float limit;
  int ksplit;         // blocks per row tile (gridDim.y)
  int64_t kcols;      // K columns per split block (the last: what is left)
  float* partials;    // split > 1: [tiles][ksplit][slot floats]
  int32_t* counters;  // split > 1: [tiles], zero between launches
  int64_t tiles;      // row tiles of all matrices (the persistent kernel walks them)
  uint64_t* stamps;   // the persistent kernel's STAMPS instances: [gridDim.x][kGemvStampFields]
  UnitParams units;   // the UNITS instances of the persistent kernel only
  int64_t kchunks;    // the kPackedWeights instances: 32-column chunks of a packed row group, ceil(K / 32)
  bool weights_evict_first;  // the weight copies' L2 policy (weight_l2_policy.cuh)
  int preissue_inflight;     // persistent kernel: stages a warp keeps in flight while it issues its stages
                             // before the PDL wait (0: all at once; DSINFER_GEMV_PREISSUE_INFLIGHT)
  bool
      parts_in_columns;  // persistent kernel, two parts, M <= 4: the parts as MMA columns (mma_stage_columns)
};

// Floats of one (tile, split) partial: TILES x 4 x 32 lane values and 32 for the sums of squares.
__host__ __device__ constexpr int slot_floats(int tiles) {
  return tiles * 4 * 32 + 32;
}

// bytes (a multiple of 16) global -> shared by the copy engine, completing on the mbarrier at shared address
// bar (sm_90; elsewhere nothing: the host packs weights only on the Hopper path).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                          const WeightL2& l2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (l2.evict_first) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(l2.policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1], %2, [%3];\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
  }
#endif
}

// 16 bytes global -> shared without registers, L2 only (weights are read once); bytes = 0 writes zeros.
__device__ __forceinline__ void copy_async16(uint4* dst, const void* src, bool valid, const WeightL2& l2) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  if (l2.evict_first) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(d),
                 "l"(src), "r"(bytes), "l"(l2.policy)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// (a, b) -> SPLITS bf16 pairs (low half = a) that add up to (a, b): with 3 parts exactly (24 bits), with
// 2 parts to ~16 bits (relative error <= 2^-17).
template <int SPLITS>
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t (&parts)[SPLITS]) {
#pragma unroll
  for (int l = 0; l < SPLITS; ++l) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    parts[l] = *reinterpret_cast<uint32_t*>(&h);
    if (l + 1 < SPLITS) {
      const float2 hf = __bfloat1622float2(h);
      a -= hf.x;
      b -= hf.y;
    }
  }
}

// c [16 x 8] += a [16 x 16] b [16 x 8] (bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The matrix row tile b belongs to and the tile's index within it.
__device__ __forceinline__ MatDesc block_matrix(const Params& p, int64_t b, int64_t& local) {
  MatDesc d = p.mats[0];
#pragma unroll
  for (int i = 1; i < kGemvMaxMatrices; ++i)
    if (i < p.count && b >= p.mats[i].first_block) d = p.mats[i];
  local = b - d.first_block;
  return d;
}

// Writes one output value: v is the dot product (up: the up projection's, SwiGLU only) before the norm
// scale `inv`. Explicitly rounded operations (never contracted into FMAs by the compiler or ptxas), so that
// every kernel calling this rounds the same way whatever code surrounds it. SCALE: the value times `scale`
// last (the units launches' routing weights).
template <bool SWIGLU, bool SCALE = false>
__device__ __forceinline__ void store_output(const Params& p, const MatDesc& d, int m, int64_t n, float v,
                                             float up, float inv, float scale = 1.0f) {
  float r = __fmul_rn(v, inv);
  if (d.bias) r = __fadd_rn(r, bf16_bits_to_float(d.bias[n]));
  if (SWIGLU) {
    float u = __fmul_rn(up, inv);
    if (p.mats[1].bias) u = __fadd_rn(u, bf16_bits_to_float(p.mats[1].bias[n]));
    if (p.limit > 0.0f) {
      r = fminf(r, p.limit);
      u = fminf(fmaxf(u, -p.limit), p.limit);
    }
    r = __fmul_rn(__fdiv_rn(r, __fadd_rn(1.0f, expf(-r))), u);
  }
  if constexpr (SCALE) r = __fmul_rn(r, scale);
  float* dst = d.y + static_cast<int64_t>(m) * d.N + n;
  *dst = p.accumulate ? __fadd_rn(*dst, r) : r;
}

// The RMSNorm scale 1 / sqrt(sumsq / K + eps) of a row, rounded the same way in every kernel.
__device__ __forceinline__ float norm_scale(float sumsq, int64_t K, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(sumsq, static_cast<float>(K)), eps));
}

// The activations (row g of x, in range when xok) and norm weights of one warp iteration at columns
// [col, col + 32 U): lane (g, t) takes columns col + 32 u + 8 t + [0, 8) of each chunk u; columns at or
// past kend read as zeros. Mostly L1 hits; issued before the wait for the iteration's weights.
template <int U>
__device__ __forceinline__ void load_activations(const Params& p, const float* xrow, bool xok, int64_t col,
                                                 int64_t kend, int t, float4 (&xv)[U][2], uint4 (&nv)[U]) {
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t k0 = col + 32 * u + 8 * t;
    const bool xin = k0 < kend && xok;
    xv[u][0] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0)) : make_float4(0, 0, 0, 0);
    xv[u][1] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0 + 4)) : make_float4(0, 0, 0, 0);
    nv[u] = (k0 < kend && p.norm != nullptr) ? __ldg(reinterpret_cast<const uint4*>(p.norm + k0)) : zero4;
  }
}

// Eight activations of one chunk (x0, x1), times the norm weights `nv` (bf16 pairs) when has_norm, their
// squares summed into sumsq first; explicitly rounded, as store_output (split_bf16 subtracts from them).
__device__ __forceinline__ void normed_activations(const float4 (&x)[2], const uint4& nv, bool has_norm,
                                                   float (&xs)[8], float& sumsq) {
  const float v[8] = {x[0].x, x[0].y, x[0].z, x[0].w, x[1].x, x[1].y, x[1].z, x[1].w};
#pragma unroll
  for (int e = 0; e < 8; ++e) xs[e] = v[e];
  if (!has_norm) return;
  const uint32_t nw[4] = {nv.x, nv.y, nv.z, nv.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sumsq = __fmaf_rn(xs[e], xs[e], sumsq);
    const uint32_t bits = (e % 2 == 0) ? (nw[e / 2] << 16) : (nw[e / 2] & 0xffff0000u);
    xs[e] = __fmul_rn(xs[e], __uint_as_float(bits));
  }
}

// One warp iteration's MMAs: the activations (times the norm weights, their squares summed into sumsq;
// explicitly rounded, as store_output) split into SPLITS bf16 parts against the landed weight stage `stage`
// ([U][TILES][2][32] uint4, or [TILES][U][2][32] with TILE_MAJOR; this lane's entries at offset 0).
template <int TILES, int U, int SPLITS, bool TILE_MAJOR = false>
__device__ __forceinline__ void mma_stage(const float4 (&xv)[U][2], const uint4 (&nv)[U], bool has_norm,
                                          const uint4* stage, float (&acc)[TILES][SPLITS][4], float& sumsq) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    float xs[8];
    normed_activations(xv[u], nv[u], has_norm, xs, sumsq);
    uint32_t bp[4][SPLITS];  // pair e = (xs[2e], xs[2e + 1]), part l
#pragma unroll
    for (int e = 0; e < 4; ++e) split_bf16<SPLITS>(xs[2 * e], xs[2 * e + 1], bp[e]);
#pragma unroll
    for (int j = 0; j < TILES; ++j) {
      const int f = TILE_MAJOR ? j * U + u : u * TILES + j;  // the (chunk, tile) fragment
      const uint4 a = stage[(f * 2 + 0) * 32], b = stage[(f * 2 + 1) * 32];
#pragma unroll
      for (int l = 0; l < SPLITS; ++l) {
        mma(acc[j][l], a.x, b.x, a.y, b.y, bp[0][l], bp[1][l]);
        mma(acc[j][l], a.z, b.z, a.w, b.w, bp[2][l], bp[3][l]);
      }
    }
  }
}

// mma_stage for two activation parts with the parts as MMA columns (M <= 4): this lane (g, t) loads
// activation row g / 2 and gives part g % 2 of it as B's column g, so column 2 m holds row m's high part and
// 2 m + 1 its low part, and one MMA per fragment computes both parts' products where mma_stage runs one per
// part. Each output element of an MMA is its own chain (its sum does not depend on the other columns), so
// acc[j][0][2 h] and [2 h + 1] (rows g + 8 h, activation row t) hold exactly what mma_stage's acc[j][0][.]
// and acc[j][1][.] hold for that row and activation row: the same bits at half the MMAs.
template <int TILES, int U, bool TILE_MAJOR = false>
__device__ __forceinline__ void mma_stage_columns(const float4 (&xv)[U][2], const uint4 (&nv)[U],
                                                  bool has_norm, const uint4* stage,
                                                  float (&acc)[TILES][2][4], float& sumsq, int part) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    float xs[8];
    normed_activations(xv[u], nv[u], has_norm, xs, sumsq);
    uint32_t bp[4];  // pair e's part `part`
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t parts[2];
      split_bf16<2>(xs[2 * e], xs[2 * e + 1], parts);
      bp[e] = part ? parts[1] : parts[0];
    }
#pragma unroll
    for (int j = 0; j < TILES; ++j) {
      const int f = TILE_MAJOR ? j * U + u : u * TILES + j;
      const uint4 a = stage[(f * 2 + 0) * 32], b = stage[(f * 2 + 1) * 32];
      mma(acc[j][0], a.x, b.x, a.y, b.y, bp[0], bp[1]);
      mma(acc[j][0], a.z, b.z, a.w, b.w, bp[2], bp[3]);
    }
  }
}

// Element i of tile j's accumulators summed over the activation parts, smallest part first.
template <int TILES, int SPLITS>
__device__ __forceinline__ float part_sum(const float (&acc)[TILES][SPLITS][4], int j, int i) {
  float sum = acc[j][SPLITS - 1][i];
#pragma unroll
  for (int l = SPLITS - 2; l >= 0; --l) sum += acc[j][l][i];
  return sum;
}

}  // namespace dsinfer::cuda::gemv_detail
