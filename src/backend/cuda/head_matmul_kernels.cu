// Per-head matmul kernels: a block stages up to 8 tokens' inputs of one head in shared memory and streams
// that head's weights once for them. transpose_w false (w [H, B, A]): one warp per output, lanes along A;
// transpose_w true (w [H, A, B]): lanes along B (coalesced weight reads), warps along A.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTokens = 8;
constexpr int64_t kSmemFloats = 11264;  // 44 KiB of staged inputs (+ 2 KiB of partial sums)

__device__ __forceinline__ float bf16f(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// xs [tt][A] <- x[t0 + k, h, :]
__device__ __forceinline__ void stage_inputs(float* xs, const float* x, int64_t t0, int nt, int h, int H,
                                             int A) {
#pragma unroll 4
  for (int i = threadIdx.x; i < nt * A; i += blockDim.x) {
    const int k = i / A, a = i % A;
    xs[i] = x[((t0 + k) * H + h) * static_cast<int64_t>(A) + a];
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    head_matmul_n_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B, int tt) {
  extern __shared__ float xs[];
  const int h = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * tt;
  const int nt = min(tt, static_cast<int>(T - t0));
  stage_inputs(xs, x, t0, nt, h, H, A);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y * (kThreads / 32) + warp;
  if (b >= B) return;
  const uint16_t* wr = w + (static_cast<int64_t>(h) * B + b) * A;
  float acc[kMaxTokens];
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k) acc[k] = 0.0f;
  for (int a = lane; a < A; a += 32) {
    const float wv = bf16f(wr[a]);
#pragma unroll
    for (int k = 0; k < kMaxTokens; ++k)
      if (k < nt) acc[k] += wv * xs[k * A + a];
  }
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k) {
    float v = acc[k];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && k < nt) y[((t0 + k) * H + h) * static_cast<int64_t>(B) + b] = v;
  }
}

// transpose_w: block (head, 64 outputs, tokens); lane l owns outputs 2l, 2l + 1 (one 32-bit weight load),
// the 8 warps split A and add their partial sums through shared memory.
__global__ void __launch_bounds__(kThreads)
    head_matmul_t_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B, int tt) {
  extern __shared__ float xs[];  // [tt][A], then [8 warps][tt][64] partial sums
  const int h = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * tt;
  const int nt = min(tt, static_cast<int>(T - t0));
  stage_inputs(xs, x, t0, nt, h, H, A);
  float* part = xs + tt * A;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y * 64 + 2 * lane;
  const bool pair = b + 1 < B;
  float acc[kMaxTokens][2];
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k) acc[k][0] = acc[k][1] = 0.0f;
  if (b < B) {
    const uint16_t* wh = w + static_cast<int64_t>(h) * A * B + b;
    const int per = (A + 7) / 8, a0 = warp * per, a1 = min(A, a0 + per);
#pragma unroll 4
    for (int a = a0; a < a1; ++a) {
      const uint16_t* wa = wh + static_cast<int64_t>(a) * B;
      float w0, w1 = 0.0f;
      if (pair && (reinterpret_cast<uintptr_t>(wa) & 3) == 0) {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(wa);
        w0 = __uint_as_float(v << 16);
        w1 = __uint_as_float(v & 0xffff0000u);
      } else {
        w0 = bf16f(wa[0]);
        if (pair) w1 = bf16f(wa[1]);
      }
#pragma unroll
      for (int k = 0; k < kMaxTokens; ++k) {
        if (k < nt) {
          const float xv = xs[k * A + a];
          acc[k][0] += w0 * xv;
          acc[k][1] += w1 * xv;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k) {
    if (k < nt) {
      part[(warp * tt + k) * 64 + 2 * lane] = acc[k][0];
      part[(warp * tt + k) * 64 + 2 * lane + 1] = acc[k][1];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nt * 64; i += kThreads) {
    const int k = i / 64, c = i % 64, bo = blockIdx.y * 64 + c;
    if (bo >= B) continue;
    float v = 0.0f;
    for (int wi = 0; wi < kThreads / 32; ++wi) v += part[(wi * tt + k) * 64 + c];
    y[((t0 + k) * H + h) * static_cast<int64_t>(B) + bo] = v;
  }
}

}  // namespace

void launch_head_matmul(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                        int64_t B, bool transpose_w) {
  DSI_CHECK(A <= kSmemFloats, "head_matmul: inner dimension ", A, " exceeds the kernel's ", kSmemFloats);
  DSI_CHECK(H <= 65535, "head_matmul: too many heads");
  if (T == 0 || H == 0 || B == 0) return;
  const int tt = static_cast<int>(std::clamp<int64_t>(kSmemFloats / std::max<int64_t>(A, 1), 1, kMaxTokens));
  const unsigned zt = static_cast<unsigned>((T + tt - 1) / tt);
  const size_t smem = static_cast<size_t>(tt) * A * sizeof(float);
  if (transpose_w) {
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + 63) / 64), zt);
    const size_t smem_t = smem + static_cast<size_t>(kThreads / 32) * tt * 64 * sizeof(float);
    head_matmul_t_kernel<<<grid, kThreads, smem_t, stream()>>>(
        x, w, y, static_cast<int>(T), static_cast<int>(H), static_cast<int>(A), static_cast<int>(B), tt);
  } else {
    const int per_block = kThreads / 32;
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + per_block - 1) / per_block), zt);
    head_matmul_n_kernel<<<grid, kThreads, smem, stream()>>>(
        x, w, y, static_cast<int>(T), static_cast<int>(H), static_cast<int>(A), static_cast<int>(B), tt);
  }
  check_launch("head_matmul");
}

}  // namespace dsinfer::cuda
