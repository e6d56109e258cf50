// The decode routing of a DeepSeekMoE layer in one launch: RMSNorm of the residual, router logits, top-k
// selection and the permutation of the (token, slot) pairs by expert, for up to kMoeNormRouteMaxTokens
// tokens. Blocks of 8 warps (the RMSNorm kernel's 256 threads) each normalise every token themselves (the
// sum of squares in launch_rms_norm's order) and write one slice of x, then compute the logits of their 8
// experts for every token in moe_logits_kernel's order from x formed on the fly; the last block to arrive
// (an arrival counter it resets, as the MLA fused merge) selects the experts of every token
// (moe_select.cuh, shared with moe_select_kernel) and builds the permutation, its pairs in pair order
// within an expert. Outputs equal, bit for bit, launch_rms_norm + launch_moe_route + launch_moe_permute.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_select.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kWarps = 8;  // experts per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxT = static_cast<int>(kMoeNormRouteMaxTokens);
constexpr size_t kSmemLimit = 48 * 1024;

__device__ __forceinline__ float bf16f(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Dynamic shared memory: the selection scratch of kWarps warps, then s_ids [pairs] and s_row [E] (ints).
size_t smem_bytes(int T, int E, const MoeRouteParams& p) {
  const int G = std::max(p.n_group, 1);
  return (static_cast<size_t>(kWarps) * detail::select_scratch_floats(E, G, p.top_k) +
          static_cast<size_t>(T) * p.top_k + E) *
         sizeof(float);
}

__global__ void __launch_bounds__(kThreads) moe_norm_route_kernel(MoeNormRouteArgs a, MoeRouteParams p) {
  extern __shared__ float smem[];
  __shared__ float s_part[kMaxT][kWarps];  // per-warp sums of squares
  __shared__ float s_inv[kMaxT];           // 1 / rms of each token
  __shared__ int s_flag;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int T = a.T, H = a.H, E = a.E;
  const int e = blockIdx.x * kWarps + warp;
  const uint16_t* w = a.router + static_cast<int64_t>(e) * H;  // [H] this warp's router row
  // The router depends on no earlier kernel: its rows head for L2 before the wait (128-byte lines).
  if (e < E)
    for (int kk = lane * 64; kk < H; kk += 32 * 64) prefetch_l2(w + kk);
  pdl_wait();
  pdl_trigger();

  // 1 / rms per token: each thread's strided partial sum, a butterfly per warp, then one warp per token
  // over the warps' sums (block_inv_rms's order with its 256 threads).
  float ss[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) ss[t] = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += kThreads) {
#pragma unroll
    for (int t = 0; t < kMaxT; ++t)
      if (t < T) {
        const float v = a.h[t * static_cast<int64_t>(H) + i];
        ss[t] += v * v;
      }
  }
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t < T) {
      float v = ss[t];
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) s_part[t][warp] = v;
    }
  }
  __syncthreads();
  if (warp < T) {
    float v = lane < kWarps ? s_part[warp][lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) s_inv[warp] = rsqrtf(v / static_cast<float>(H) + a.eps);
  }
  __syncthreads();
  float inv[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) inv[t] = t < T ? s_inv[t] : 0.0f;

  // x [T, H]: this block's slice of the columns, rms_norm_kernel's expression.
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < H;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float nw = bf16f(a.norm[i]);
    for (int t = 0; t < T; ++t) {
      const int64_t at = t * static_cast<int64_t>(H) + i;
      a.x[at] = nw * (a.h[at] * s_inv[t]);
    }
  }

  // logits [T, E] of this warp's expert: lane l takes inputs 8l + 256i, x formed as above, the products
  // summed in moe_logits_kernel's order.
  if (e < E) {
    float dot[kMaxT];
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) dot[t] = 0.0f;
#pragma unroll 2
    for (int kk = lane * 8; kk < H; kk += 256) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(w + kk));
      const uint32_t b[4] = {v.x, v.y, v.z, v.w};
      const uint4 nv = __ldg(reinterpret_cast<const uint4*>(a.norm + kk));
      const uint32_t nb[4] = {nv.x, nv.y, nv.z, nv.w};
      float nf[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        nf[2 * i] = __uint_as_float(nb[i] << 16);
        nf[2 * i + 1] = __uint_as_float(nb[i] & 0xffff0000u);
      }
#pragma unroll
      for (int t = 0; t < kMaxT; ++t) {
        if (t < T) {
          const float* ht = a.h + t * static_cast<int64_t>(H) + kk;
          const float4 h0 = __ldg(reinterpret_cast<const float4*>(ht));
          const float4 h1 = __ldg(reinterpret_cast<const float4*>(ht + 4));
          const float hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
          float xv[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) xv[i] = nf[i] * (hv[i] * inv[t]);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            dot[t] += xv[2 * i] * __uint_as_float(b[i] << 16);
            dot[t] += xv[2 * i + 1] * __uint_as_float(b[i] & 0xffff0000u);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      const float d = detail::route_warp_sum(dot[t]);
      if (lane == 0 && t < T) a.logits[t * static_cast<int64_t>(E) + e] = d;
    }
  }

  // The last block to arrive routes every token: one warp per token.
  if (!detail::mla_arrive_last(a.arrivals, static_cast<int>(gridDim.x), &s_flag)) return;
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  const int scratch = detail::select_scratch_floats(E, G, K);
  if (warp < T)
    detail::route_select_token(a.logits + static_cast<int64_t>(warp) * E, a.bias, a.ids + warp * K,
                               a.weights + warp * K, E, p, smem + warp * scratch);
  if (a.tile_rows <= 0) return;
  __syncthreads();  // this block's ids are visible to all its threads

  // The permutation: rows per expert, exclusive prefix sums of rows and tiles, then each pair's row.
  const int pairs = T * K, tile_rows = a.tile_rows;
  int32_t* s_ids = reinterpret_cast<int32_t*>(smem + kWarps * scratch);  // [pairs]
  int32_t* s_row = s_ids + pairs;  // [E] rows of each expert, then its first row
  for (int i = threadIdx.x; i < pairs; i += kThreads) s_ids[i] = __ldcg(a.ids + i);
  for (int x = threadIdx.x; x < E; x += kThreads) s_row[x] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += kThreads) {
    const int x = s_ids[i];
    if (x >= 0 && x < E) atomicAdd(&s_row[x], 1);
  }
  __syncthreads();
  if (warp == 0) {
    int off = 0, tl = 0;
    for (int x0 = 0; x0 < E; x0 += 32) {
      const int x = x0 + lane;
      const int c = x < E ? s_row[x] : 0, n = (c + tile_rows - 1) / tile_rows;
      int ci = c, ti = n;  // inclusive scans over the 32 experts
      for (int o = 1; o < 32; o *= 2) {
        const int uc = __shfl_up_sync(0xffffffffu, ci, o), ut = __shfl_up_sync(0xffffffffu, ti, o);
        if (lane >= o) {
          ci += uc;
          ti += ut;
        }
      }
      if (x < E) {
        a.offsets[x] = off + ci - c;
        a.tiles[x] = tl + ti - n;
        s_row[x] = off + ci - c;
      }
      off += __shfl_sync(0xffffffffu, ci, 31);
      tl += __shfl_sync(0xffffffffu, ti, 31);
    }
    if (lane == 0) {
      a.offsets[E] = off;
      a.tiles[E] = tl;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += kThreads) {
    const int x = s_ids[i];
    if (x >= 0 && x < E) {
      int rank = 0;
      for (int j = 0; j < i; ++j) rank += s_ids[j] == x;
      const int32_t slot = s_row[x] + rank;
      a.slot_pair[slot] = i;
      a.pair_slot[i] = slot;
    } else {
      a.pair_slot[i] = -1;
    }
  }
}

}  // namespace

bool moe_norm_route_supported(const MoeNormRouteArgs& a, const MoeRouteParams& p) {
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return a.T >= 1 && a.T <= kMoeNormRouteMaxTokens && a.H >= 8 && a.H % 8 == 0 && a.E >= 1 &&
         a.E <= kMaxRoutedExperts && p.top_k >= 1 && p.top_k <= a.E &&
         (p.method == MoeTopk::kGreedy || (p.n_group >= 1 && p.n_group <= a.E && p.topk_group >= 1)) &&
         aligned(a.h) && aligned(a.norm) && aligned(a.router) && aligned(a.x) &&
         smem_bytes(a.T, a.E, p) <= kSmemLimit;
}

void launch_moe_norm_route(const MoeNormRouteArgs& a, const MoeRouteParams& p) {
  DSI_CHECK(moe_norm_route_supported(a, p), "moe_norm_route: unsupported shape (T ", a.T, ", hidden ", a.H,
            ", ", a.E, " experts, top ", p.top_k, ") or unaligned operands");
  DSI_CHECK(a.arrivals != nullptr, "moe_norm_route: no arrival counter");
  const unsigned blocks = static_cast<unsigned>((a.E + kWarps - 1) / kWarps);
  launch_pdl(moe_norm_route_kernel, blocks, kThreads, smem_bytes(a.T, a.E, p), a, p);
  check_launch("moe_norm_route");
}

}  // namespace dsinfer::cuda
