// Per-head matmul on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate) for batches of 16 tokens and
// more. Block (head, 32 tokens, 16 * NT outputs), 4 warps as 2 (tokens) x 2 (outputs), each warp 16
// tokens x 8 * NT outputs. The weight tile of 64 inputs is staged in shared memory as [output][input]
// (w x: copied row by row; w^T x: transposed while staging); x fragments come straight from global memory
// and are split into three bf16 parts (hi, mid, lo: 24 bits, so products are those of fp32 x), one MMA
// each. Every output sums its inputs in the same order whatever T or the tile.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kTileTokens = 32;
constexpr int kKc = 64;  // inputs per staged weight tile
constexpr int kPad = 8;  // bf16 padding per staged row (fragment reads hit 32 distinct banks)
constexpr int kSplits = 3;

// (a, b) -> kSplits bf16 pairs (low half = a) that add up to (a, b).
__device__ __forceinline__ void split3(float a, float b, uint32_t (&parts)[kSplits]) {
#pragma unroll
  for (int l = 0; l < kSplits; ++l) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    parts[l] = *reinterpret_cast<const uint32_t*>(&v);
    const float2 f = __bfloat1622float2(v);
    a -= f.x;
    b -= f.y;
  }
}

__device__ __forceinline__ float2 load_x2(const float* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const float2*>(p)) : make_float2(0.0f, 0.0f);
}

// kT: w [H, A, B] (y = w^T x); else w [H, B, A] (y = w x). x [T, H, A], y [T, H, B]; A % kKc == 0,
// B % (16 * NT) == 0.
template <bool kT, int NT>
__global__ void __launch_bounds__(kThreads)
    head_matmul_mma_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B) {
  pdl_wait();
  pdl_trigger();
  constexpr int kN = 16 * NT;  // outputs per block
  __shared__ __align__(16) uint16_t ws[kN][kKc + kPad];
  const int h = blockIdx.z, n0 = blockIdx.x * kN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp & 1, wn = warp >> 1, g = lane >> 2, tig = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTileTokens + wm * 16 + g, r1 = r0 + 8;
  const bool ok0 = r0 < T, ok1 = r1 < T;
  const float* x0 = x + (r0 * H + h) * static_cast<int64_t>(A);
  const float* x1 = x + (r1 * H + h) * static_cast<int64_t>(A);
  float c[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;

  for (int kc0 = 0; kc0 < A; kc0 += kKc) {
    __syncthreads();  // the previous tile is consumed
    if (!kT) {
      // ws[n][k] = w[h, n0 + n, kc0 + k]
      for (int i = threadIdx.x; i < kN * kKc / 8; i += kThreads) {
        const int row = i / (kKc / 8), c8 = i % (kKc / 8) * 8;
        *reinterpret_cast<uint4*>(&ws[row][c8]) = __ldg(
            reinterpret_cast<const uint4*>(w + (static_cast<int64_t>(h) * B + n0 + row) * A + kc0 + c8));
      }
    } else {
      // ws[n][k] = w[h, kc0 + k, n0 + n]
      for (int i = threadIdx.x; i < kKc * kN / 8; i += kThreads) {
        const int k = i / (kN / 8), b8 = i % (kN / 8) * 8;
        const uint4 v =
            __ldg(reinterpret_cast<const uint4*>(w + (static_cast<int64_t>(h) * A + kc0 + k) * B + n0 + b8));
        const uint32_t bits[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          ws[b8 + 2 * j][k] = static_cast<uint16_t>(bits[j] & 0xffffu);
          ws[b8 + 2 * j + 1][k] = static_cast<uint16_t>(bits[j] >> 16);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kKc; ks += 16) {
      const int k = kc0 + ks + tig * 2;
      // A fragment (16 tokens x 16 inputs): a0 (row g, k), a1 (row g + 8, k), a2 (row g, k + 8),
      // a3 (row g + 8, k + 8), each two consecutive inputs.
      const float2 p[4] = {load_x2(x0 + k, ok0), load_x2(x1 + k, ok1), load_x2(x0 + k + 8, ok0),
                           load_x2(x1 + k + 8, ok1)};
      uint32_t a[kSplits][4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t parts[kSplits];
        split3(p[q].x, p[q].y, parts);
#pragma unroll
        for (int s = 0; s < kSplits; ++s) a[s][q] = parts[s];
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const uint16_t* wrow = &ws[wn * NT * 8 + n * 8 + g][ks + tig * 2];
        const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(wrow),
                               *reinterpret_cast<const uint32_t*>(wrow + 8)};
#pragma unroll
        for (int s = 0; s < kSplits; ++s) mma_bf16(c[n], a[s], b);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = n0 + wn * NT * 8 + n * 8 + tig * 2;
    if (ok0)
      *reinterpret_cast<float2*>(y + (r0 * H + h) * static_cast<int64_t>(B) + col) =
          make_float2(c[n][0], c[n][1]);
    if (ok1)
      *reinterpret_cast<float2*>(y + (r1 * H + h) * static_cast<int64_t>(B) + col) =
          make_float2(c[n][2], c[n][3]);
  }
}

template <bool kT, int NT>
void launch_tiles(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B) {
  const dim3 grid(static_cast<unsigned>(B / (16 * NT)),
                  static_cast<unsigned>((T + kTileTokens - 1) / kTileTokens), static_cast<unsigned>(H));
  launch_pdl(head_matmul_mma_kernel<kT, NT>, grid, kThreads, 0, x, w, y, static_cast<int>(T),
             static_cast<int>(H), static_cast<int>(A), static_cast<int>(B));
  check_launch("head_matmul (tensor cores)");
}

}  // namespace

bool head_matmul_mma_supported(const float* x, const uint16_t* w, int64_t A, int64_t B) {
  return A > 0 && A % kKc == 0 && B % 32 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_head_matmul_mma(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w) {
  DSI_CHECK(head_matmul_mma_supported(x, w, A, B), "head_matmul: shape not taken by the tensor-core kernel");
  DSI_CHECK(H <= 65535 && (T + kTileTokens - 1) / kTileTokens <= 65535, "head_matmul: grid too large");
  if (T == 0 || H == 0 || B == 0) return;
  // 64 outputs per block where that still gives two blocks per SM (H200: 132), else 32.
  const int64_t wide_blocks = B / 64 * ((T + kTileTokens - 1) / kTileTokens) * H;
  const bool wide = B % 64 == 0 && wide_blocks >= 264;
  if (transpose_w) {
    wide ? launch_tiles<true, 4>(x, w, y, T, H, A, B) : launch_tiles<true, 2>(x, w, y, T, H, A, B);
  } else {
    wide ? launch_tiles<false, 4>(x, w, y, T, H, A, B) : launch_tiles<false, 2>(x, w, y, T, H, A, B);
  }
}

}  // namespace dsinfer::cuda
