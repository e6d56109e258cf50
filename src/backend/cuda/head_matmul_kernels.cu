// Per-head matmul on CUDA cores and the dispatch. Batches of up to 8 tokens (next_pow2) run the tiled GEMV
// kernels (head_gemv_kernels.cu). The older GEMV kernels here take the shapes those do not (x too large
// for their shared memory) and larger batches the tensor-core kernel does not take, and stay reachable
// for benchmarks (kHeadGemvLegacy); they stream each weight once per 8 tokens with 16-byte loads: w x (w
// [H, B, A]) one warp per 2 outputs, lanes along A; w^T x (w [H, A, B]) lanes along B (8 outputs each),
// warps along A, partial sums added in warp order. From 16 tokens the tensor-core kernel
// (head_matmul_mma_kernels.cu). Shapes none takes run the general kernels: a block stages up to 8 tokens'
// inputs of one head in shared memory and streams that head's weights once for them. Every output's
// summation order depends on the shape (and the path, chosen from next_pow2(T)) only.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTokens = 8;
constexpr int64_t kSmemFloats = 11264;       // w x: 44 KiB of staged inputs
constexpr int64_t kSmemLimitFloats = 12288;  // 48 KiB: w^T x's staged inputs and partial sums

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
  pdl_wait();
  pdl_trigger();
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
    const float wv = bf16_bits_to_float(wr[a]);
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
  pdl_wait();
  pdl_trigger();
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
        w0 = bf16_bits_to_float(wa[0]);
        if (pair) w1 = bf16_bits_to_float(wa[1]);
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

constexpr int kGemvTokens = 8;  // tokens per GEMV block
constexpr int kNRows = 2;       // outputs per warp (w x)
constexpr int kNWarps = 4;      // warps per block (w x)
constexpr int kTTokens = 4;     // tokens per block (w^T x)
constexpr int kTWarps = 8;      // warps along A per block (w^T x)
constexpr int kTOutputs = 256;  // outputs per block (w^T x): 8 per lane
constexpr int64_t kTSmemFloats = 12288 - kTWarps * kTTokens * kTOutputs;  // staged inputs (48 KiB in all)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y = w x, A % 8 == 0, x and w 16-byte aligned. Block (head, kNWarps * kNRows outputs, kGemvTokens
// tokens); lane l takes inputs 8l + 256i of each of its warp's rows.
__global__ void __launch_bounds__(kNWarps * 32)
    head_gemv_n_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b0 = (blockIdx.y * kNWarps + warp) * kNRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * kGemvTokens;
  const int nt = min(kGemvTokens, static_cast<int>(T - t0));
  if (b0 >= B) return;
  const uint16_t* wr[kNRows];
#pragma unroll
  for (int r = 0; r < kNRows; ++r) wr[r] = w + (static_cast<int64_t>(h) * B + min(b0 + r, B - 1)) * A;
  float acc[kNRows][kGemvTokens];
#pragma unroll
  for (int r = 0; r < kNRows; ++r)
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) acc[r][t] = 0.0f;
#pragma unroll 2
  for (int kk = lane * 8; kk < A; kk += 256) {
    float wf[kNRows][8];
#pragma unroll
    for (int r = 0; r < kNRows; ++r) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(wr[r] + kk));
      const uint32_t bits[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wf[r][2 * i] = __uint_as_float(bits[i] << 16);
        wf[r][2 * i + 1] = __uint_as_float(bits[i] & 0xffff0000u);
      }
    }
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
      if (t < nt) {
        const float* xr = x + ((t0 + t) * H + h) * static_cast<int64_t>(A) + kk;
        const float4 x0 = __ldg(reinterpret_cast<const float4*>(xr));
        const float4 x1 = __ldg(reinterpret_cast<const float4*>(xr + 4));
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int r = 0; r < kNRows; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][t] += wf[r][i] * xv[i];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kNRows; ++r) {
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && t < nt && b0 + r < B) y[((t0 + t) * H + h) * static_cast<int64_t>(B) + b0 + r] = v;
    }
  }
}

// y = w^T x, B % 8 == 0, w 16-byte aligned, A <= kTSmemFloats / kTTokens. Block (head, kTOutputs outputs,
// kTTokens tokens); lane l owns outputs 8l..8l+7 (one 16-byte weight load per input), warp i sums inputs
// [i * ceil(A / 8), (i + 1) * ceil(A / 8)) in order; the warps' partial sums are added in warp order.
__global__ void __launch_bounds__(kTWarps * 32)
    head_gemv_t_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float xs[];  // [kTTokens][A], then [kTWarps][kTTokens][kTOutputs] partial sums
  float* part = xs + kTTokens * A;
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * kTTokens;
  const int nt = min(kTTokens, static_cast<int>(T - t0));
  stage_inputs(xs, x, t0, nt, h, H, A);
  const int b = blockIdx.y * kTOutputs + lane * 8;
  float acc[kTTokens][8];
#pragma unroll
  for (int t = 0; t < kTTokens; ++t)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[t][i] = 0.0f;
  if (b < B) {
    const int per = (A + kTWarps - 1) / kTWarps, a0 = warp * per, a1 = min(A, a0 + per);
    const uint16_t* wh = w + static_cast<int64_t>(h) * A * B + b;
#pragma unroll 8
    for (int a = a0; a < a1; ++a) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(wh + static_cast<int64_t>(a) * B));
      const uint32_t bits[4] = {v.x, v.y, v.z, v.w};
      float wf[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wf[2 * i] = __uint_as_float(bits[i] << 16);
        wf[2 * i + 1] = __uint_as_float(bits[i] & 0xffff0000u);
      }
#pragma unroll
      for (int t = 0; t < kTTokens; ++t) {
        if (t < nt) {
          const float xv = xs[t * A + a];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[t][i] += wf[i] * xv;
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTTokens; ++t) {
    if (t < nt) {
      float4* dst = reinterpret_cast<float4*>(part + (warp * kTTokens + t) * kTOutputs + lane * 8);
      dst[0] = make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
      dst[1] = make_float4(acc[t][4], acc[t][5], acc[t][6], acc[t][7]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nt * kTOutputs; i += kTWarps * 32) {
    const int t = i / kTOutputs, c = i % kTOutputs, bo = blockIdx.y * kTOutputs + c;
    if (bo >= B) continue;
    float v = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kTWarps; ++wi) v += part[(wi * kTTokens + t) * kTOutputs + c];
    y[((t0 + t) * H + h) * static_cast<int64_t>(B) + bo] = v;
  }
}
}  // namespace

void launch_head_matmul(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                        int64_t B, bool transpose_w, int gemv_tile) {
  DSI_CHECK(A <= kSmemFloats, "head_matmul: inner dimension ", A, " exceeds the kernel's ", kSmemFloats);
  DSI_CHECK(H <= 65535, "head_matmul: too many heads");
  if (T == 0 || H == 0 || B == 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // Tensor cores from 16 tokens (as a graph's padded batch would count them): same kernel eagerly and
  // replayed.
  if (next_pow2(T) >= 16 && head_matmul_mma_supported(x, w, A, B)) {
    launch_head_matmul_mma(x, w, y, T, H, A, B, transpose_w);
    return;
  }
  if (gemv_tile != kHeadGemvLegacy && next_pow2(T) <= 8 &&
      launch_head_gemv_tiled(x, w, y, T, H, A, B, transpose_w, gemv_tile))
    return;
  if (transpose_w && B % 8 == 0 && aligned(w) && A * kTTokens <= kTSmemFloats) {
    DSI_CHECK((T + kTTokens - 1) / kTTokens <= 65535, "head_matmul: too many tokens");
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + kTOutputs - 1) / kTOutputs),
                    static_cast<unsigned>((T + kTTokens - 1) / kTTokens));
    const size_t smem = static_cast<size_t>(kTTokens * A + kTWarps * kTTokens * kTOutputs) * sizeof(float);
    launch_pdl(head_gemv_t_kernel, grid, kTWarps * 32, smem, x, w, y, static_cast<int>(T),
               static_cast<int>(H), static_cast<int>(A), static_cast<int>(B));
    check_launch("head_matmul (w^T x)");
    return;
  }
  if (!transpose_w && A % 8 == 0 && aligned(w) && aligned(x)) {
    DSI_CHECK((T + kGemvTokens - 1) / kGemvTokens <= 65535, "head_matmul: too many tokens");
    constexpr int per_block = kNWarps * kNRows;
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + per_block - 1) / per_block),
                    static_cast<unsigned>((T + kGemvTokens - 1) / kGemvTokens));
    launch_pdl(head_gemv_n_kernel, grid, kNWarps * 32, 0, x, w, y, static_cast<int>(T), static_cast<int>(H),
               static_cast<int>(A), static_cast<int>(B));
    check_launch("head_matmul (w x)");
    return;
  }
  // Tokens per block: their staged inputs (w^T x: also the warps' partial sums, 64 per warp and token) within
  // the 48 KiB a launch may use without opting in.
  const int64_t per_token = transpose_w ? A + (kThreads / 32) * 64 : A;
  const int64_t budget = transpose_w ? kSmemLimitFloats : kSmemFloats;
  DSI_CHECK(per_token <= budget, "head_matmul: inner dimension ", A, " exceeds the kernel's shared memory");
  const int tt = static_cast<int>(std::clamp<int64_t>(budget / per_token, 1, kMaxTokens));
  const unsigned zt = static_cast<unsigned>((T + tt - 1) / tt);
  const size_t smem = static_cast<size_t>(tt) * A * sizeof(float);
  if (transpose_w) {
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + 63) / 64), zt);
    const size_t smem_t = smem + static_cast<size_t>(kThreads / 32) * tt * 64 * sizeof(float);
    launch_pdl(head_matmul_t_kernel, grid, kThreads, smem_t, x, w, y, static_cast<int>(T),
               static_cast<int>(H), static_cast<int>(A), static_cast<int>(B), tt);
  } else {
    const int per_block = kThreads / 32;
    const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + per_block - 1) / per_block), zt);
    launch_pdl(head_matmul_n_kernel, grid, kThreads, smem, x, w, y, static_cast<int>(T), static_cast<int>(H),
               static_cast<int>(A), static_cast<int>(B), tt);
  }
  check_launch("head_matmul");
}

}  // namespace dsinfer::cuda
