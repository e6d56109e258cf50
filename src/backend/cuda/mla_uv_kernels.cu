// The MLA decode merge with W_UV applied: one kernel in place of the split combine kernel and the W_UV head
// GEMV at one or two decode tokens (next_pow2(T) <= 2; measured slower from 8). Block = (head, tile of 16
// output rows), 256 threads: the tile's W_UV rows are put in flight before pdl_wait (weights depend on no
// earlier kernel), then the block merges its head's split states for each of the T tokens into shared memory
// (detail::mla_merge_weights / mla_merge_sum4: the combine kernel's arithmetic and order, so the same latent
// bits; the 8 tiles of a head each merge it again, from L2) and multiplies by W_UV[h] as
// head_gemv_n_tile_kernel<NT, 2> does (detail::HeadGemvN: the same sums in the same order). So its output has
// the bits of the composition combine + head_matmul with the default GEMV tile, and a row's result depends on
// that row alone. One token with at most 16 splits (batch-1 decode up to 1024-token contexts) takes
// merge_one_round, every load in one round trip, the same bits. While GEMV stamps are on (gemv_stamps.h) the
// launch runs the STAMPS instance (same bits), whose blocks record their timeline.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/head_gemv_n.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = detail::kHeadGemvThreads;
constexpr int kRowsPerWarp = 2;  // head_gemv's default w x tile: 16 output rows a block
constexpr int kRowsPerBlock = detail::kHeadGemvWarps * kRowsPerWarp;
constexpr int64_t kMaxTokens = 2;       // bucketed tokens the kernel takes (mla_merge_uv_supported)
constexpr int64_t kSmemFloats = 12288;  // 48 KiB: the merged latents, the merge weights, 1 / L
constexpr int kOneRoundSplits = 16;     // one token, at most this many splits: every load issued at once

// One token's merge with every load in flight at once (one L2 round trip after the wait instead of three: the
// split states, then again for the sums, then the partial latents): every warp computes the merge weights
// itself from its lanes' split states (lane s: split s; mla_merge_weights's arithmetic and butterflies, so
// the same bits in every warp), and thread i < R / 4 merges latents [4 i, 4 i + 4) from the values it loaded
// before (mla_merge_sum4's fmas in split order, the weights from their lanes by shuffles). xs [R] receives
// the merged latents, as the general path writes them.
__device__ __forceinline__ void merge_one_round(const float* ws_acc, const float* ws_ml, int H, int R,
                                                int splits, int h, float* xs) {
  const int lane = threadIdx.x % 32;
  const float* ml = ws_ml + static_cast<int64_t>(h) * 2;  // split s at + s * 2H
  const bool has = lane < splits;
  const float m = has ? __ldcg(ml + static_cast<int64_t>(lane) * 2 * H) : -INFINITY;
  const float l_s = has ? __ldcg(ml + static_cast<int64_t>(lane) * 2 * H + 1) : 0.0f;
  const bool mine = static_cast<int>(threadIdx.x) < R / 4;
  const float* src = ws_acc + static_cast<int64_t>(h) * R + (mine ? 4 * threadIdx.x : 0);
  const int64_t acc_step = static_cast<int64_t>(H) * R;
  float4 v[kOneRoundSplits];
#pragma unroll
  for (int j = 0; j < kOneRoundSplits; ++j)
    v[j] = mine && j < splits ? __ldcg(reinterpret_cast<const float4*>(src + j * acc_step))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float mx = fmaxf(-INFINITY, m);
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float wt = has && m != -INFINITY ? expf(m - mx) : 0.0f;
  float l = has ? fmaf(wt, l_s, 0.0f) : 0.0f;
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  const float inv = 1.0f / l;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kOneRoundSplits; ++j) {
    if (j < splits) {
      const float w = __shfl_sync(0xffffffffu, wt, j);
      acc.x = fmaf(w, v[j].x, acc.x);
      acc.y = fmaf(w, v[j].y, acc.y);
      acc.z = fmaf(w, v[j].z, acc.z);
      acc.w = fmaf(w, v[j].w, acc.w);
    }
  }
  if (mine)
    *reinterpret_cast<float4*>(xs + 4 * threadIdx.x) =
        make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
}

// y [T, H, V] = W_UV[h] (merge of the splits of (t, h)). ws_acc [T, splits, H, R], ws_ml [T, splits, H, 2],
// w [H, V, R] bf16. STAMPS: thread 0 records the block's timeline into `stamps` (gemv_stamps.h's slot of
// this launch): start, issued (its W_UV rows requested), waited, merged (the latents in shared memory), W_UV
// done and end (the same moment: after its outputs are stored); then its SM. The same bits.
template <int NT, bool STAMPS>
__global__ void __launch_bounds__(kThreads)
    mla_merge_uv_kernel(const float* ws_acc, const float* ws_ml, const uint16_t* w, float* y, int T, int H,
                        int R, int V, int splits, int tiles, bool evict_first, uint64_t* stamps) {
  auto st = [&](int point) {
    if constexpr (STAMPS) {
      if (threadIdx.x == 0) {
        uint64_t now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        stamps[static_cast<int64_t>(blockIdx.x) * kGemvStampFields + point] = now;
        if (point == kStampEnd) {
          unsigned sm;
          asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
          stamps[static_cast<int64_t>(blockIdx.x) * kGemvStampFields + kStampFieldSm] = sm;
        }
      }
    }
  };
  st(kStampStart);
  const int h = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  detail::HeadGemvN<NT, kRowsPerWarp> gemv(w, h, tile, R, V,
                                           evict_first);  // W_UV rows in flight before the wait
  st(kStampIssued);
  pdl_wait();
  pdl_trigger();
  st(kStampWaited);
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [NT][R] merged latents, tokens >= T zero
  if (NT == 1 && splits <= kOneRoundSplits && R / 4 <= kThreads) {
    merge_one_round(ws_acc, ws_ml, H, R, splits, h, xs);
    __syncthreads();
    st(kStampConsumed);
    gemv.run(xs, y, T, H, h);
    st(kStampLastIssue);
    st(kStampEnd);
    return;
  }
  float* w_s = xs + NT * R;          // [NT][splits] merge weights
  float* inv_s = w_s + NT * splits;  // [NT] 1 / L
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warp t: the weights of token t (NT <= 8 warps).
  if (warp < T) {
    const float inv = detail::mla_merge_weights(ws_ml + (static_cast<int64_t>(warp) * splits * H + h) * 2,
                                                int64_t{2} * H, splits, w_s + warp * splits);
    if (lane == 0) inv_s[warp] = inv;
  }
  for (int i = T * R + threadIdx.x; i < NT * R; i += kThreads) xs[i] = 0.0f;
  __syncthreads();
  const int r4 = R / 4;
  const int64_t acc_step = static_cast<int64_t>(H) * R;  // floats between consecutive splits
  for (int idx = threadIdx.x; idx < T * r4; idx += kThreads) {
    const int t = idx / r4, r = (idx % r4) * 4;
    const float* src = ws_acc + (static_cast<int64_t>(t) * splits * H + h) * R + r;
    const float4 o = detail::mla_merge_sum4(src, acc_step, w_s + t * splits, splits);
    const float inv = inv_s[t];
    *reinterpret_cast<float4*>(xs + t * R + r) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
  }
  __syncthreads();
  st(kStampConsumed);
  gemv.run(xs, y, T, H, h);
  st(kStampLastIssue);
  st(kStampEnd);
}

template <int NT>
void launch_nt(const float* ws_acc, const float* ws_ml, const uint16_t* w, float* y, int64_t T, int64_t H,
               int64_t R, int64_t V, int splits) {
  const int64_t tiles = (V + kRowsPerBlock - 1) / kRowsPerBlock;
  const size_t smem = static_cast<size_t>(NT * (R + splits + 1)) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(H * tiles));
  // With GEMV stamps on (gemv_stamps.h) the launch takes a stamp slot as a launch of T rows, K = R and tiles
  // = V, and runs the STAMPS instance.
  uint64_t* stamps = next_gemv_stamp_slot(T, R, false, grid.x, V);
  launch_pdl(stamps ? mla_merge_uv_kernel<NT, true> : mla_merge_uv_kernel<NT, false>, grid, kThreads, smem,
             ws_acc, ws_ml, w, y, static_cast<int>(T), static_cast<int>(H), static_cast<int>(R),
             static_cast<int>(V), splits, static_cast<int>(tiles), gemv_weights_evict_first(), stamps);
  check_launch("attention_mla_uv (merge + W_UV)");
}

}  // namespace

bool mla_merge_uv_supported(int64_t T, int64_t H, int64_t R, int64_t V, int splits, uintptr_t w) {
  // Up to 2 (bucketed) tokens: DISABLED_BenchMlaUvFused on the H200 (2026-12-01, 16 heads, graph us,
  // composed -> fused) T 1: ctx 192 12.74 -> 12.03, 1024 15.37 -> 13.61, 4096 26.47 -> 19.49; T 2: 13.22 ->
  // 12.77, 16.03 -> 14.53, 28.68 -> 25.63; T 4 even (14.04 -> 14.11, 17.75 -> 17.08, 26.09 -> 26.17); T 8
  // slower (16.21 -> 17.44, 20.04 -> 26.86): each of a head's blocks merges every token's splits again.
  const int64_t nt = next_pow2(std::max<int64_t>(T, 1));
  if (T < 1 || nt > kMaxTokens || splits < 2 || H < 1 || V < 1 || R % 8 != 0 || w % 16 != 0) return false;
  if (nt * (R + splits + 1) > kSmemFloats) return false;
  return H * ((V + kRowsPerBlock - 1) / kRowsPerBlock) < (int64_t{1} << 31);
}

void launch_mla_merge_uv(const float* ws_acc, const float* ws_ml, const uint16_t* w_uv, float* y, int64_t T,
                         int64_t H, int64_t R, int64_t V, int splits) {
  DSI_CHECK(mla_merge_uv_supported(T, H, R, V, splits, reinterpret_cast<uintptr_t>(w_uv)),
            "attention_mla_uv: the merge + W_UV kernel does not take T ", T, ", R ", R, ", V ", V, ", ",
            splits, " splits");
  if (next_pow2(T) == 1) return launch_nt<1>(ws_acc, ws_ml, w_uv, y, T, H, R, V, splits);
  launch_nt<2>(ws_acc, ws_ml, w_uv, y, T, H, R, V, splits);
}

}  // namespace dsinfer::cuda
