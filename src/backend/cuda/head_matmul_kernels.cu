// Per-head matmul kernels: a block stages up to 8 tokens' inputs of one head in shared memory and streams
// that head's weights once for them. transpose_w false (w [H, B, A]): one warp per output, lanes along A;
// transpose_w true (w [H, A, B]): one thread per output, threads along B (coalesced weight reads).
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTokens = 8;
constexpr int64_t kSmemFloats = 12288;  // 48 KiB of staged inputs

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel ", what, " failed to launch: ", cudaGetErrorString(err));
}

__device__ __forceinline__ float bf16f(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// xs [tt][A] <- x[t0 + k, h, :]
__device__ __forceinline__ void stage_inputs(float* xs, const float* x, int64_t t0, int nt, int h, int H,
                                             int A) {
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

__global__ void __launch_bounds__(kThreads)
    head_matmul_t_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B, int tt) {
  extern __shared__ float xs[];
  const int h = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * tt;
  const int nt = min(tt, static_cast<int>(T - t0));
  stage_inputs(xs, x, t0, nt, h, H, A);
  const int b = blockIdx.y * kThreads + threadIdx.x;
  if (b >= B) return;
  const uint16_t* wh = w + static_cast<int64_t>(h) * A * B + b;
  float acc[kMaxTokens];
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k) acc[k] = 0.0f;
  for (int a = 0; a < A; ++a) {
    const float wv = bf16f(wh[static_cast<int64_t>(a) * B]);
#pragma unroll
    for (int k = 0; k < kMaxTokens; ++k)
      if (k < nt) acc[k] += wv * xs[k * A + a];
  }
#pragma unroll
  for (int k = 0; k < kMaxTokens; ++k)
    if (k < nt) y[((t0 + k) * H + h) * static_cast<int64_t>(B) + b] = acc[k];
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
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + kThreads - 1) / kThreads), zt);
    head_matmul_t_kernel<<<grid, kThreads, smem, stream()>>>(
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
