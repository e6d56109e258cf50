// Block-level pieces of the warpgroup-MMA MLA decode kernel (mla_wgmma_tma_kernels.cu), kept apart from its
// warp roles: the tile geometry (64 cached rows x 576 values as 9 boxes of [64 rows][64 values] in the
// 128-byte-swizzle layout), the queries staged as bf16 hi + lo parts, and the epilogue that writes one
// block's outputs or partial state (and runs the fused merge in the last split block to arrive).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/wgmma_common.cuh"

namespace dsinfer::cuda::mla_wg {

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16;
constexpr int kRows = 64;                            // cached rows per tile (the MMA's M)
constexpr int kBoxes = kD / 64;                      // 9 boxes of 64 values per row
constexpr uint32_t kBoxBytes = kRows * 128;          // 8,192
constexpr uint32_t kTileBytes = kBoxes * kBoxBytes;  // 73,728
constexpr uint32_t kQBoxBytes = 2 * kHeads * 128;    // [32 rows (hi, lo)][64 values] bf16: 4,096
constexpr uint32_t kQBytes = kBoxes * kQBoxBytes;    // 36,864
constexpr uint32_t kPBytes = 2 * kHeads * 128;       // P [32][64] bf16, swizzled: 4,096
constexpr int kLdO = kR + 4;                         // staged output row stride (floats)
constexpr uint32_t kOsBytes = kHeads * kLdO * 4;     // the staged output: 33,024
static_assert(kD % 64 == 0 && kR % 64 == 0, "whole boxes");

__device__ __forceinline__ uint32_t pack2(__nv_bfloat16 a, __nv_bfloat16 b) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(a)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(b)) << 16);
}

// The 16 heads' queries of token t from head h0 (heads past hg zero) into q_g: row h (bf16 hi part) and 16 +
// h (lo part) of each of the 9 boxes, swizzled like the tiles. Threads [0, nthreads) take part; the caller
// fences the async proxy and synchronises before MMAs read them.
__device__ __forceinline__ void stage_queries(unsigned char* q_g, const float* q_lat, const float* q_pe,
                                              int64_t t, int H, int h0, int hg, int tid, int nthreads) {
  for (int idx = tid; idx < kHeads * kBoxes * 8; idx += nthreads) {
    const int h = idx / (kBoxes * 8), c = idx % (kBoxes * 8);  // c: 16-byte chunk of the 576 values
    const int d = c * 8;
    float v[8] = {};
    if (h < hg) {
      const int64_t row = t * H + h0 + h;
      const float* src = d < kR ? q_lat + row * kR + d : q_pe + row * kP + (d - kR);
      const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat16 a = __float2bfloat16_rn(v[2 * k]), b = __float2bfloat16_rn(v[2 * k + 1]);
      hi[k] = pack2(a, b);
      lo[k] = pack2(__float2bfloat16_rn(v[2 * k] - __bfloat162float(a)),
                    __float2bfloat16_rn(v[2 * k + 1] - __bfloat162float(b)));
    }
    unsigned char* const box = q_g + (c / 8) * kQBoxBytes;
    *reinterpret_cast<uint4*>(box + wgmma::swizzled128(h, c % 8)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    *reinterpret_cast<uint4*>(box + wgmma::swizzled128(kHeads + h, c % 8)) =
        make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// The block's outputs from the staged output buffer o_s ([16][kLdO] floats) and ml_s (head h's maximum at
// [h], sum at [16 + h]): normalised into out when the context is not split, else the partial state into
// ws_acc / ws_ml, then the fused merge in the last split block to arrive (merge weights in merge_s:
// kTcMergeFloats floats; flag_s: an int). Every thread of the block calls it.
__device__ __forceinline__ void write_outputs(const float* o_s, const float* ml_s, float* out, float* ws_acc,
                                              float* ws_ml, int* arrivals, int64_t tl, int64_t t, int H,
                                              int h0, int hg, int split, int splits, float* merge_s,
                                              int* flag_s) {
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int64_t ws_base = (tl * splits + split) * H + h0;
  for (int idx = tid; idx < hg * (kR / 4); idx += nthreads) {
    const int h = idx / (kR / 4), r = (idx % (kR / 4)) * 4;
    float4 v = *reinterpret_cast<const float4*>(o_s + h * kLdO + r);
    if (splits == 1) {
      const float inv = 1.0f / ml_s[kHeads + h];
      v = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
      *reinterpret_cast<float4*>(out + (t * H + h0 + h) * kR + r) = v;
    } else {
      *reinterpret_cast<float4*>(ws_acc + (ws_base + h) * kR + r) = v;
    }
  }
  if (splits > 1 && tid < hg) {
    ws_ml[(ws_base + tid) * 2] = ml_s[tid];
    ws_ml[(ws_base + tid) * 2 + 1] = ml_s[kHeads + tid];
  }
  if (splits > 1 && arrivals && detail::mla_arrive_last(arrivals + blockIdx.x, splits, flag_s))
    detail::mla_merge(ws_acc, ws_ml, tl, t, H, kR, h0, hg, splits, out, merge_s,
                      merge_s + kTcMergeFloats - kHeads);
}

}  // namespace dsinfer::cuda::mla_wg
