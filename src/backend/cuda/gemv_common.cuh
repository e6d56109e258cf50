// Device helpers and launch parameters the GEMV kernels share (gemv_kernels.cu: one block per row tile;
// gemv_stream_k.cu: a fixed grid streaming equal shares of the work): the launch's matrices, cp.async
// copies, the bf16 split of fp32 activations, the m16n8k16 MMA and the output epilogue (bias, SwiGLU,
// residual accumulate).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_kernels.h"

namespace dsinfer::cuda::gemv {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

// A launch's matrices as the kernels see them: tile (or block) b belongs to the last matrix whose first
// one (`first_block`) is <= b.
struct MatDesc {
  const uint16_t* w;
  const uint16_t* bias;
  float* y;
  int64_t N;
  int64_t first_block;
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
};

__device__ __forceinline__ float bf16_to_f32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// 16 bytes global -> shared without registers, L2 only (weights are read once); bytes = 0 writes zeros.
__device__ __forceinline__ void copy_async16(uint4* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes)
               : "memory");
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

// The matrix tile (or block) b belongs to and its index within that matrix.
__device__ __forceinline__ MatDesc block_matrix(const Params& p, int64_t b, int64_t& local) {
  MatDesc d = p.mats[0];
#pragma unroll
  for (int i = 1; i < kGemvMaxMatrices; ++i)
    if (i < p.count && b >= p.mats[i].first_block) d = p.mats[i];
  local = b - d.first_block;
  return d;
}

// Writes one output value: v is the dot product (up: the up projection's, SwiGLU only) before the norm
// scale `inv`.
template <bool SWIGLU>
__device__ __forceinline__ void store_output(const Params& p, const MatDesc& d, int m, int64_t n, float v,
                                             float up, float inv) {
  float r = v * inv;
  if (d.bias) r += bf16_to_f32(d.bias[n]);
  if (SWIGLU) {
    float u = up * inv;
    if (p.mats[1].bias) u += bf16_to_f32(p.mats[1].bias[n]);
    if (p.limit > 0.0f) {
      r = fminf(r, p.limit);
      u = fminf(fmaxf(u, -p.limit), p.limit);
    }
    r = r / (1.0f + expf(-r)) * u;
  }
  float* dst = d.y + static_cast<int64_t>(m) * d.N + n;
  *dst = p.accumulate ? *dst + r : r;
}

// Loads the activation and norm-weight values lane (g, t) needs for 32-column chunk starting at `c0`
// (columns c0 + 8t .. + 8), applies the norm weight (sum of squares into *sumsq when not null) and splits
// them into bf16 parts: bp[e][l] = part l of the pair (x[2e], x[2e + 1]).
template <int SPLITS>
__device__ __forceinline__ void chunk_activations(float4 x0, float4 x1, uint4 nv, bool has_norm, float* sumsq,
                                                  uint32_t (&bp)[4][SPLITS]) {
  float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  if (has_norm) {
    const uint32_t nw[4] = {nv.x, nv.y, nv.z, nv.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (sumsq) *sumsq += xs[e] * xs[e];
      const uint32_t bits = (e % 2 == 0) ? (nw[e / 2] << 16) : (nw[e / 2] & 0xffff0000u);
      xs[e] *= __uint_as_float(bits);
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) split_bf16<SPLITS>(xs[2 * e], xs[2 * e + 1], bp[e]);
}

}  // namespace dsinfer::cuda::gemv
