// DeepSeekMoE routing in two kernels. Logits: blocks of (8 experts, 8 tokens), one warp per expert streaming
// its router row once for the tile's tokens (16-byte loads); every (token, expert) dot product is summed in
// the same order whatever the tile or batch, so equal router rows tie exactly and a row's logits do not
// depend on the other rows. Selection: one warp per token scores, masks groups and picks the top k by
// repeated arg-max (ties: lower index), as CpuBackend::moe_route (moe_select.cuh, shared with the fused
// decode routing kernel of moe_norm_route_kernels.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_select.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kLogitWarps = 8;   // experts per logits block
constexpr int kLogitTokens = 8;  // tokens per logits block
constexpr int kSelectWarps = 4;  // tokens per selection block (1 where a warp's scratch is large)

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// logits [T, E] = x [T, H] router [E, H]^T. kVec: lane l takes inputs 8l + 256i (H % 8 == 0, 16-byte
// aligned x and router); else inputs l + 32i. Each lane's partial sum runs over its inputs in order, then a
// butterfly over the warp: the order depends on H only.
template <bool kVec>
__global__ void __launch_bounds__(kLogitWarps * 32)
    moe_logits_kernel(const float* x, const uint16_t* router, float* logits, int T, int H, int E) {
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kLogitWarps + warp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kLogitTokens;
  const int nt = min(kLogitTokens, static_cast<int>(T - t0));
  if (e >= E) return;
  const uint16_t* w = router + static_cast<int64_t>(e) * H;
  const float* xt = x + t0 * H;
  float dot[kLogitTokens];
#pragma unroll
  for (int t = 0; t < kLogitTokens; ++t) dot[t] = 0.0f;
  if (kVec) {
#pragma unroll 4
    for (int kk = lane * 8; kk < H; kk += 256) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(w + kk));
      const uint32_t b[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int t = 0; t < kLogitTokens; ++t) {
        if (t < nt) {
          const float4 x0 = __ldg(reinterpret_cast<const float4*>(xt + static_cast<int64_t>(t) * H + kk));
          const float4 x1 = __ldg(reinterpret_cast<const float4*>(xt + static_cast<int64_t>(t) * H + kk + 4));
          const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            dot[t] += xv[2 * i] * __uint_as_float(b[i] << 16);
            dot[t] += xv[2 * i + 1] * __uint_as_float(b[i] & 0xffff0000u);
          }
        }
      }
    }
  } else {
    for (int i = lane; i < H; i += 32) {
      const float wv = bf16_bits_to_float(w[i]);
#pragma unroll
      for (int t = 0; t < kLogitTokens; ++t)
        if (t < nt) dot[t] += xt[static_cast<int64_t>(t) * H + i] * wv;
    }
  }
#pragma unroll
  for (int t = 0; t < kLogitTokens; ++t) {
    const float d = warp_sum(dot[t]);
    if (lane == 0 && t < nt) logits[(t0 + t) * E + e] = d;
  }
}

__global__ void moe_select_kernel(const float* logits, const float* bias, int32_t* ids, float* wout, int T,
                                  int E, MoeRouteParams p) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  const int warp = threadIdx.x / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (t >= T) return;
  detail::route_select_token(logits + t * E, bias, ids + t * K, wout + t * K, E, p,
                             smem + warp * detail::select_scratch_floats(E, G, K));
}

}  // namespace

void launch_moe_route(const float* x, const uint16_t* router, const float* bias, float* logits, int32_t* ids,
                      float* weights, int64_t T, int64_t H, int64_t E, const MoeRouteParams& p) {
  DSI_CHECK(E > 0 && E <= kMaxRoutedExperts, "moe_route: ", E, " experts (the CUDA kernel takes 1 to ",
            kMaxRoutedExperts, ")");
  DSI_CHECK(p.top_k >= 1 && p.top_k <= E, "moe_route: top_k ", p.top_k, " for ", E, " experts");
  DSI_CHECK(p.method == MoeTopk::kGreedy || (p.n_group >= 1 && p.n_group <= E && p.topk_group >= 1),
            "moe_route: bad expert groups (n_group ", p.n_group, ", topk_group ", p.topk_group, ")");
  DSI_CHECK(T <= int64_t{kLogitTokens} * 65535, "moe_route: ", T, " tokens exceed the kernel's grid");
  if (T == 0) return;
  // [T, E] logits
  const dim3 lgrid(static_cast<unsigned>((E + kLogitWarps - 1) / kLogitWarps),
                   static_cast<unsigned>((T + kLogitTokens - 1) / kLogitTokens));
  if (H % 8 == 0 && aligned16(router) && aligned16(x)) {
    launch_pdl(moe_logits_kernel<true>, lgrid, kLogitWarps * 32, 0, x, router, logits, static_cast<int>(T),
               static_cast<int>(H), static_cast<int>(E));
  } else {
    launch_pdl(moe_logits_kernel<false>, lgrid, kLogitWarps * 32, 0, x, router, logits, static_cast<int>(T),
               static_cast<int>(H), static_cast<int>(E));
  }
  check_launch("moe_route logits");
  // ids, weights [T, K]
  const int G = std::max(p.n_group, 1);
  const size_t per_warp =
      static_cast<size_t>(detail::select_scratch_floats(static_cast<int>(E), G, p.top_k)) * sizeof(float);
  DSI_CHECK(per_warp <= 48 * 1024, "moe_route: ", E, " experts, top ", p.top_k, " too large for the kernel");
  const int warps = per_warp * kSelectWarps <= 48 * 1024 ? kSelectWarps : 1;
  launch_pdl(moe_select_kernel, static_cast<unsigned>((T + warps - 1) / warps), warps * 32, per_warp * warps,
             logits, bias, ids, weights, static_cast<int>(T), static_cast<int>(E), p);
  check_launch("moe_route select");
}

}  // namespace dsinfer::cuda
