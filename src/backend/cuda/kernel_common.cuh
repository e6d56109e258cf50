// Helpers every kernel file shares (.cu only): the runtime-call and launch checks, a block's piecewise copy
// loop (move_pieces), bf16 bits to float and the bf16 tensor-core MMA (mma.sync m16n8k16, bf16 inputs, fp32
// accumulate; sm_80 and newer).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace dsinfer::cuda {

// Throws when a CUDA runtime call returned an error.
inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(err));
}

// Throws when the last kernel launch failed (bad configuration, too much shared memory, ...).
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel ", what, " failed to launch: ", cudaGetErrorString(err));
}

// Whether a pointer allows 16-byte (uint4 / float4) accesses.
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Moves pieces 0..n-1 with one block of kBlock threads: piece c is load(c), then store(c, value). A thread
// takes pieces threadIdx.x + j kBlock of each round of kBlock kPer pieces and issues all its loads of a round
// before its stores, so a round costs one memory round trip (a loop of load + store per piece waits for each
// load: the stores may alias the loads).
template <int kBlock, int kPer, typename Load, typename Store>
__device__ __forceinline__ void move_pieces(int64_t n, Load load, Store store) {
  using Piece = decltype(load(int64_t{0}));
  for (int64_t base = 0; base < n; base += int64_t{kBlock} * kPer) {
    Piece v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t c = base + j * kBlock + threadIdx.x;
      if (c < n) v[j] = load(c);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t c = base + j * kBlock + threadIdx.x;
      if (c < n) store(c, v[j]);
    }
  }
}

// The float a bf16 value's 16 bits stand for (exact: bf16 is float32's top half).
__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// c[4] += A (16x16 bf16, row-major fragments a[4]) * B (16x8 bf16, column fragments b[2]).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// 1 / sqrt(mean(row^2) + eps) of row [H], computed by the whole block (blockDim.x a multiple of 32, at most
// 1024) and returned to every thread.
__device__ __forceinline__ float block_inv_rms(const float* row, int64_t H, float eps) {
  __shared__ float partial[32];
  float ss = 0.0f;
  // Thread x sums elements x, x + blockDim.x, ... in that order (other kernels reproduce these bits); four
  // loads go out before their sums, so that a long row is not a chain of dependent L2 round trips.
  const int64_t step = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + 3 * step < H; i += 4 * step) {
    const float a = row[i], b = row[i + step], c = row[i + 2 * step], d = row[i + 3 * step];
    ss += a * a;
    ss += b * b;
    ss += c * c;
    ss += d * d;
  }
  for (; i < H; i += step) ss += row[i] * row[i];
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  return rsqrtf(partial[0] / static_cast<float>(H) + eps);
}

// The sum of every thread's v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread; callable several times in a row (it synchronises before returning).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
  __syncthreads();  // every thread has read the partials before a next call writes them
  return total;
}

// A load of a flag or counter another block releases (ld.acquire.gpu): what the block reads after it sees
// everything the releasing block wrote before its release.
__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace dsinfer::cuda
