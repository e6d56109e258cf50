// The block-level code of head_matmul's tiled decode GEMV (next_pow2(T) <= 8), shared by its kernels
// (head_gemv_kernels.cu) and the kernels that run it beside other work in one launch
// (mla_prepare_kernels.cu), so that every launch of a tile computes the same sums in the same order (the same
// bits). Weights are loaded before pdl_wait (they never depend on an earlier kernel), the batch's x after it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/weight_l2_policy.cuh"

namespace dsinfer::cuda::head_gemv {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPassRows = 128;      // w^T x: rows of A loaded at once (one pass)
constexpr int kPassInputs = 512;    // w x: inputs of A loaded at once per row (two 16-byte chunks a lane)
constexpr int kSmemFloats = 12288;  // 48 KiB: staged x plus the warps' partial sums (w^T x)
constexpr int kDefaultChunks = 8;   // w^T x: 64 outputs a block
constexpr int kDefaultRows = 2;     // w x: 16 outputs a block

// 16 bytes of weights, streamed (read-only path, not kept in L1; l2: weight_l2_policy.cuh).
__device__ __forceinline__ uint4 load_weights16(const uint16_t* p, const WeightL2& l2) {
  uint4 v;
  if (l2.evict_first) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(l2.policy));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  }
  return v;
}

// The 8 bf16 values of v as floats.
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t bits[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(bits[i] << 16);
    f[2 * i + 1] = __uint_as_float(bits[i] & 0xffff0000u);
  }
}

// xs [NT][A] <- x[t, h, :] for t < T, zeros for T <= t < NT, by the whole block: 4 loads in flight per
// thread before their stores. VEC 4: float4 loads (A % 4 == 0, x 16-byte aligned), else 1.
template <int NT, int VEC>
__device__ __forceinline__ void stage_x(float* xs, const float* x, int T, int H, int h, int A) {
  using V = std::conditional_t<VEC == 4, float4, float>;
  const int n = NT * A / VEC, row = A / VEC;  // vectors in all, per token
  V* dst = reinterpret_cast<V*>(xs);
  for (int i0 = 0; i0 < n; i0 += 4 * kThreads) {
    V v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * kThreads + threadIdx.x, t = i / row, a = i % row;
      if (i < n && t < T)
        v[u] = reinterpret_cast<const V*>(x + (static_cast<int64_t>(t) * H + h) * A)[a];
      else
        v[u] = V{};
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * kThreads + threadIdx.x;
      if (i < n) dst[i] = v[u];
    }
  }
  __syncthreads();
}

// Floats of shared memory t_tile needs: the staged x [NT][A] (rounded up to float4) and the warps' partial
// sums [kWarps][NT][8 * CW].
template <int NT, int CW>
constexpr int64_t t_smem_floats(int64_t A) {
  return ((NT * A + 3) & ~int64_t{3}) + kWarps * NT * 8 * CW;
}

// Block `block` (of H * tiles) of y = w^T x for up to NT tokens (T <= NT), w [H, A, B], x [T, H, A], y [T, H,
// B]; smem: t_smem_floats<NT, CW>(A) floats, 16-byte aligned. Block = (head, CW * 8 outputs); thread (c, r)
// = (tid % CW, tid / CW) owns outputs 8c..8c+7 of the tile and rows r, r + 256 / CW, ... of each 128-row
// pass of A. Called by all kThreads threads of the block; calls pdl_wait and pdl_trigger. evict_first: the
// weights' L2 policy (weight_l2_policy.cuh).
template <int NT, int CW>
__device__ __forceinline__ void t_tile(const float* x, const uint16_t* w, float* y, int T, int H, int A,
                                       int B, int tiles, int block, float* smem, bool evict_first) {
  const WeightL2 l2 = weight_l2(evict_first);
  constexpr int kGroups = kThreads / CW;       // row groups
  constexpr int kLoads = kPassRows / kGroups;  // rows of a pass per thread
  constexpr int kCols = 8 * CW;                // outputs per block
  const int h = block / tiles, tile = block % tiles;
  const int c = threadIdx.x % CW, r = threadIdx.x / CW, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = tile * kCols + 8 * c;
  const bool col_ok = col < B;
  const uint16_t* wh = w + static_cast<int64_t>(h) * A * B + (col_ok ? col : 0);  // row a at wh + a * B
  uint4 wv[kLoads];
  auto load_pass = [&](int a0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int a = a0 + r + kGroups * i;
      wv[i] = col_ok && a < A ? load_weights16(wh + static_cast<int64_t>(a) * B, l2) : make_uint4(0, 0, 0, 0);
    }
  };
  load_pass(0);
  pdl_wait();
  pdl_trigger();
  float* xs = smem;                        // [NT][A], tokens >= T zero
  float* part = xs + ((NT * A + 3) & ~3);  // [kWarps][NT][kCols]
  stage_x<NT, 1>(xs, x, T, H, h, A);
  float acc[NT][8];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[t][j] = 0.0f;
  for (int a0 = 0; a0 < A; a0 += kPassRows) {
    if (a0 > 0) load_pass(a0);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int a = a0 + r + kGroups * i;
      if (a < A) {
        float wf[8];
        unpack8(wv[i], wf);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const float xv = xs[t * A + a];
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t][j] += wf[j] * xv;
        }
      }
    }
  }
  // The warp's row groups (lanes c, c + CW, ...), then the warps in order.
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int o = CW; o < 32; o *= 2) acc[t][j] += __shfl_xor_sync(0xffffffffu, acc[t][j], o);
  constexpr int kLaneGroups = 32 / CW;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (lane / CW == t % kLaneGroups) {
      float4* dst = reinterpret_cast<float4*>(part + (warp * NT + t) * kCols + 8 * c);
      dst[0] = make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
      dst[1] = make_float4(acc[t][4], acc[t][5], acc[t][6], acc[t][7]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < T * kCols; i += kThreads) {
    const int t = i / kCols, cc = i % kCols, b = tile * kCols + cc;
    if (b >= B) continue;
    float v = part[t * kCols + cc];
#pragma unroll
    for (int wi = 1; wi < kWarps; ++wi) v += part[(wi * NT + t) * kCols + cc];
    y[(static_cast<int64_t>(t) * H + h) * B + b] = v;
  }
}

}  // namespace dsinfer::cuda::head_gemv
