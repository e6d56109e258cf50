// The decode GEMV kernels of head_matmul (next_pow2(T) <= 8): one block per (head, tile of outputs) so that a
// 16-head 2 MB weight already fills ~128 blocks, each thread's 16-byte weight loads all issued at once and
// before pdl_wait (weights never depend on an earlier kernel), the batch's x read after it. w^T x (w [H, A,
// B]): 256 threads = CW column chunks (8 outputs each) x 256 / CW row groups; a thread sums its rows in
// order, the row groups of a warp are added by a shuffle butterfly, the 8 warps in warp order through
// shared memory. w x (w [H, B, A]): 8 warps x R rows, lanes along A (16-byte chunks), warp butterfly. Each
// output's summation order depends on the shape and the tile only, never on T or the other tokens. The w^T x
// block's code is head_gemv_device.cuh's, which the fused MLA prepare kernel runs too (the same bits).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/head_gemv_device.cuh"
#include "backend/cuda/head_gemv_n.cuh"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using head_gemv::kDefaultChunks;
using head_gemv::kDefaultRows;
using head_gemv::kPassInputs;
using head_gemv::kSmemFloats;
using head_gemv::kThreads;
using head_gemv::kWarps;
using head_gemv::load_weights16;
using head_gemv::stage_x;
using head_gemv::unpack8;

// y = w^T x for up to NT tokens (T <= NT): one block per (head, CW * 8 outputs), head_gemv::t_tile.
template <int NT, int CW>
__global__ void __launch_bounds__(kThreads)
    head_gemv_t_tile_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B,
                            int tiles, bool evict_first) {
  extern __shared__ float4 smem4[];
  head_gemv::t_tile<NT, CW>(x, w, y, T, H, A, B, tiles, static_cast<int>(blockIdx.x),
                            reinterpret_cast<float*>(smem4), evict_first);
}

// y = w x for up to NT tokens (T <= NT), A % 8 == 0, x and w 16-byte aligned. Block = (head, 8 * R rows):
// detail::HeadGemvN (head_gemv_n.cuh).
template <int NT, int R>
__global__ void __launch_bounds__(kThreads)
    head_gemv_n_tile_kernel(const float* x, const uint16_t* w, float* y, int T, int H, int A, int B,
                            int tiles, bool evict_first) {
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  detail::HeadGemvN<NT, R> gemv(w, h, tile, A, B, evict_first);  // first weights in flight before the wait
  pdl_wait();
  pdl_trigger();
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [NT][A], tokens >= T zero
  stage_x<NT, 4>(xs, x, T, H, h, A);
  gemv.run(xs, y, T, H, h);
}

template <int NT, int CW>
bool launch_t(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B) {
  const size_t smem = static_cast<size_t>(head_gemv::t_smem_floats<NT, CW>(A)) * sizeof(float);
  if (smem > kSmemFloats * sizeof(float)) return false;
  const int64_t tiles = (B + 8 * CW - 1) / (8 * CW);
  DSI_CHECK(H * tiles < (int64_t{1} << 31), "head_matmul: too many blocks");
  launch_pdl(head_gemv_t_tile_kernel<NT, CW>, dim3(static_cast<unsigned>(H * tiles)), kThreads, smem, x, w, y,
             static_cast<int>(T), static_cast<int>(H), static_cast<int>(A), static_cast<int>(B),
             static_cast<int>(tiles), gemv_weights_evict_first());
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
             static_cast<int>(A), static_cast<int>(B), static_cast<int>(tiles), gemv_weights_evict_first());
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
// default tiles of w^T x (4, 8 or 16) and w x (1, 2 or 4); unset: kDefaultChunks, kDefaultRows; any other
// value is an error.
int default_tile(bool transpose_w) {
  static const std::pair<int, int> tiles = [] {
    const std::pair<int, int> fallback{kDefaultChunks, kDefaultRows};
    const char* env = std::getenv("DSINFER_CUDA_HEAD_GEMV");
    if (!env || !*env) return fallback;
    if (std::string_view(env) == "legacy") return std::pair<int, int>{kHeadGemvLegacy, kHeadGemvLegacy};
    int t = 0, n = 0;
    char comma = 0;
    int used = 0;
    const bool parsed = std::sscanf(env, "%d%c%d%n", &t, &comma, &n, &used) == 3 && comma == ',' &&
                        env[used] == '\0' && (t == 4 || t == 8 || t == 16) && (n == 1 || n == 2 || n == 4);
    DSI_CHECK(parsed, "DSINFER_CUDA_HEAD_GEMV must be legacy or T,N with T in 4|8|16 and N in 1|2|4, got \"",
              env, "\"");
    return std::pair<int, int>{t, n};
  }();
  return transpose_w ? tiles.first : tiles.second;
}

}  // namespace

int head_gemv_default_tile(bool transpose_w) {
  return default_tile(transpose_w);
}

bool launch_head_gemv_tiled(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w, int tile) {
  if (T < 1 || next_pow2(T) > 8 || !aligned16(w) || A > (int64_t{1} << 30) || B > (int64_t{1} << 30))
    return false;
  if (transpose_w ? B % 8 != 0 : (A % 8 != 0 || !aligned16(x))) return false;
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
