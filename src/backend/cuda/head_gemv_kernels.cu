// The decode GEMV kernels of head_matmul (next_pow2(T) <= 8): one block per (head, tile of outputs) so that a
// 16-head 2 MB weight already fills ~128 blocks, each thread's 16-byte weight loads all issued at once and
// before pdl_wait (weights never depend on an earlier kernel), the batch's x read after it. w^T x (w [H, A,
// B]): 256 threads = CW column chunks (8 outputs each) x 256 / CW row groups; a thread sums its rows in
// order, the row groups of a warp are added by a shuffle butterfly, the 8 warps in warp order through
// shared memory. w x (w [H, B, A]): 8 warps x R rows, lanes along A (16-byte chunks), warp butterfly. Each
// output's summation order depends on the shape and the tile only, never on T or the other tokens.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/head_gemv_n.cuh"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using detail::load_weights16;
using detail::unpack8;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPassRows = 128;      // w^T x: rows of A loaded at once (one pass)
constexpr int kSmemFloats = 12288;  // 48 KiB: staged x plus the warps' partial sums (w^T x)
constexpr int kDefaultChunks = 8;   // w^T x: 64 outputs a block
constexpr int kDefaultRows = 2;     // w x: 16 outputs a block

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

// y = w^T x for up to NT tokens (T <= NT). Block = (head, CW * 8 outputs); thread (c, r) = (tid % CW, tid /
// CW) owns outputs 8c..8c+7 of the tile and rows r, r + 256 / CW, ... of each 128-row pass of A.
template <int NT, int CW>
__global__ void __launch_bounds__(kThreads)
    head_gemv_t_tile_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B,
                            int tiles) {
  constexpr int kGroups = kThreads / CW;       // row groups
  constexpr int kLoads = kPassRows / kGroups;  // rows of a pass per thread
  constexpr int kCols = 8 * CW;                // outputs per block
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int c = threadIdx.x % CW, r = threadIdx.x / CW, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = tile * kCols + 8 * c;
  const bool col_ok = col < B;
  const uint16_t* wh = w + static_cast<int64_t>(h) * A * B + (col_ok ? col : 0);  // row a at wh + a * B
  uint4 wv[kLoads];
  auto load_pass = [&](int a0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int a = a0 + r + kGroups * i;
      wv[i] = col_ok && a < A ? load_weights16(wh + static_cast<int64_t>(a) * B) : make_uint4(0, 0, 0, 0);
    }
  };
  load_pass(0);
  pdl_wait();
  pdl_trigger();
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [NT][A], tokens >= T zero
  float* part = xs + ((NT * A + 3) & ~3);       // [kWarps][NT][kCols]
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

// y = w x for up to NT tokens (T <= NT), A % 8 == 0, x and w 16-byte aligned. Block = (head, 8 * R rows):
// detail::HeadGemvN (head_gemv_n.cuh).
template <int NT, int R>
__global__ void __launch_bounds__(kThreads)
    head_gemv_n_tile_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B,
                            int tiles) {
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  detail::HeadGemvN<NT, R> gemv(w, h, tile, A, B);  // first weights in flight before the wait
  pdl_wait();
  pdl_trigger();
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [NT][A], tokens >= T zero
  stage_x<NT, 4>(xs, x, T, H, h, A);
  gemv.run(xs, y, T, H, h);
}

template <int NT, int CW>
size_t t_smem_bytes(int64_t A) {
  return static_cast<size_t>(((NT * A + 3) & ~int64_t{3}) + kWarps * NT * 8 * CW) * sizeof(float);
}

template <int NT, int CW>
bool launch_t(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B) {
  const size_t smem = t_smem_bytes<NT, CW>(A);
  if (smem > kSmemFloats * sizeof(float)) return false;
  const int64_t tiles = (B + 8 * CW - 1) / (8 * CW);
  DSI_CHECK(H * tiles < (int64_t{1} << 31), "head_matmul: too many blocks");
  launch_pdl(head_gemv_t_tile_kernel<NT, CW>, dim3(static_cast<unsigned>(H * tiles)), kThreads, smem, x, w, y,
             static_cast<int>(T), static_cast<int>(H), static_cast<int>(A), static_cast<int>(B),
             static_cast<int>(tiles));
  check_launch("head_matmul (w^T x, tiled GEMV)");
  return true;
}

template <int NT, int R>
bool launch_n(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B) {
  if (NT * A > kSmemFloats) return false;
  const int64_t tiles = (B + kWarps * R - 1) / (kWarps * R);
  DSI_CHECK(H * tiles < (int64_t{1} << 31), "head_matmul: too many blocks");
  launch_pdl(head_gemv_n_tile_kernel<NT, R>, dim3(static_cast<unsigned>(H * tiles)), kThreads,
             static_cast<size_t>(NT * A) * sizeof(float), x, w, y, static_cast<int>(T), static_cast<int>(H),
             static_cast<int>(A), static_cast<int>(B), static_cast<int>(tiles));
  check_launch("head_matmul (w x, tiled GEMV)");
  return true;
}

template <int NT>
bool launch_nt(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B,
               bool transpose_w, int tile) {
  if (transpose_w) {
    switch (tile) {
      case 4:
        return launch_t<NT, 4>(x, w, y, T, H, A, B);
      case 8:
        return launch_t<NT, 8>(x, w, y, T, H, A, B);
      case 16:
        return launch_t<NT, 16>(x, w, y, T, H, A, B);
      default:
        return false;
    }
  }
  switch (tile) {
    case 1:
      return launch_n<NT, 1>(x, w, y, T, H, A, B);
    case 2:
      return launch_n<NT, 2>(x, w, y, T, H, A, B);
    case 4:
      return launch_n<NT, 4>(x, w, y, T, H, A, B);
    default:
      return false;
  }
}

// DSINFER_CUDA_HEAD_GEMV: "legacy" the older GEMV kernels (launch_head_gemv_tiled declines), "T,N" the
// default tiles of w^T x (4, 8 or 16) and w x (1, 2 or 4); unset or invalid: kDefaultChunks, kDefaultRows.
int default_tile(bool transpose_w) {
  static const std::pair<int, int> tiles = [] {
    const std::pair<int, int> fallback{kDefaultChunks, kDefaultRows};
    const char* env = std::getenv("DSINFER_CUDA_HEAD_GEMV");
    if (!env || !*env) return fallback;
    if (std::string_view(env) == "legacy") return std::pair<int, int>{kHeadGemvLegacy, kHeadGemvLegacy};
    int t = 0, n = 0;
    char comma = 0;
    if (std::sscanf(env, "%d%c%d", &t, &comma, &n) != 3 || comma != ',') return fallback;
    if ((t != 4 && t != 8 && t != 16) || (n != 1 && n != 2 && n != 4)) return fallback;
    return std::pair<int, int>{t, n};
  }();
  return transpose_w ? tiles.first : tiles.second;
}

}  // namespace

bool launch_head_gemv_tiled(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w, int tile) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (T < 1 || next_pow2(T) > 8 || !aligned(w) || A > (int64_t{1} << 30) || B > (int64_t{1} << 30))
    return false;
  if (transpose_w ? B % 8 != 0 : (A % 8 != 0 || !aligned(x))) return false;
  if (tile == 0) tile = default_tile(transpose_w);
  switch (next_pow2(T)) {
    case 1:
      return launch_nt<1>(x, w, y, T, H, A, B, transpose_w, tile);
    case 2:
      return launch_nt<2>(x, w, y, T, H, A, B, transpose_w, tile);
    case 4:
      return launch_nt<4>(x, w, y, T, H, A, B, transpose_w, tile);
    default:
      return launch_nt<8>(x, w, y, T, H, A, B, transpose_w, tile);
  }
}

}  // namespace dsinfer::cuda
