// Tensor-core grouped expert GEMMs for many routed rows (prefill, large batches): one launch covers every
// expert's 64-row tiles (found by binary search over the device tile offsets of launch_moe_permute, blocks
// past the last tile exit). Each block computes a 64 x 64 output tile with mma.sync m16n8k16 (bf16 in, fp32
// accumulate; sm_80 and later): 4 warps of 32 x 32, K in steps of 32 staged through shared memory. With
// `split` the fp32 activations are split into bf16 hi + lo halves (two MMAs), keeping ~16 bits of each as
// linear() does; without, they are rounded to bf16.
// Gate/up blocks stage the gate and the up rows of the same outputs and apply SiLU-mul in the epilogue.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kBM = kMoeMmaTileRows, kBN = 64, kBK = 32, kPad = 8, kLd = kBK + kPad;
constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// hi = bf16(v), lo = bf16(v - hi), packed two values per 32 bits.
__device__ __forceinline__ void split2(float v0, float v1, __nv_bfloat162* hi, __nv_bfloat162* lo) {
  const __nv_bfloat16 h0 = __float2bfloat16_rn(v0), h1 = __float2bfloat16_rn(v1);
  hi->x = h0;
  hi->y = h1;
  lo->x = __float2bfloat16_rn(v0 - __bfloat162float(h0));
  lo->y = __float2bfloat16_rn(v1 - __bfloat162float(h1));
}

// A fragment of m16n8k16 (rows r0 .. r0 + 15, k0 .. k0 + 15) from a [rows][kLd] tile.
__device__ __forceinline__ void load_a(uint32_t* a, const __nv_bfloat16* s, int r0, int k0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  a[0] = ld32(s + (r0 + g) * kLd + k0 + 2 * t);
  a[1] = ld32(s + (r0 + g + 8) * kLd + k0 + 2 * t);
  a[2] = ld32(s + (r0 + g) * kLd + k0 + 2 * t + 8);
  a[3] = ld32(s + (r0 + g + 8) * kLd + k0 + 2 * t + 8);
}

// B fragment (k0 .. k0 + 15, columns n0 .. n0 + 7) from a [columns][kLd] tile (k contiguous).
__device__ __forceinline__ void load_b(uint32_t* b, const __nv_bfloat16* s, int n0, int k0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  b[0] = ld32(s + (n0 + g) * kLd + k0 + 2 * t);
  b[1] = ld32(s + (n0 + g) * kLd + k0 + 2 * t + 8);
}

template <bool kGateUp, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    moe_mma_kernel(const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                   const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int E, int K,
                   int N, float limit) {
  pdl_wait();
  pdl_trigger();
  __shared__ __align__(16) __nv_bfloat16 a_hi[kBM * kLd], a_lo[kBM * kLd];
  __shared__ __align__(16) __nv_bfloat16 b1_s[kBN * kLd], b2_s[kGateUp ? kBN * kLd : 1];
  __shared__ int src_row[kBM];
  ExpertTile et;
  if (!find_expert_tile(offsets, tiles, E, blockIdx.x, kBM, &et)) return;
  const int e = et.expert, row0 = et.row0, nr = et.rows;
  const int n_base = blockIdx.y * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int r = tid; r < kBM; r += kThreads)
    src_row[r] = r < nr ? (kGateUp ? slot_pair[row0 + r] / topk : row0 + r) : -1;
  const uint16_t* w1e = w1.base + e * w1.stride;
  const uint16_t* w2e = kGateUp ? w2.base + e * w2.stride : nullptr;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  float acc1[2][4][4], acc2[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc1[i][j][c] = acc2[i][j][c] = 0.0f;
  __syncthreads();

  for (int k0 = 0; k0 < K; k0 += kBK) {
    // A: 64 rows x 32 floats = 512 float4, 4 per thread.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx / 8, c = (idx % 8) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (src_row[r] >= 0)
        v = *reinterpret_cast<const float4*>(a + static_cast<int64_t>(src_row[r]) * K + k0 + c);
      __nv_bfloat162 h01, l01, h23, l23;
      split2(v.x, v.y, &h01, &l01);
      split2(v.z, v.w, &h23, &l23);
      *reinterpret_cast<__nv_bfloat162*>(a_hi + r * kLd + c) = h01;
      *reinterpret_cast<__nv_bfloat162*>(a_hi + r * kLd + c + 2) = h23;
      *reinterpret_cast<__nv_bfloat162*>(a_lo + r * kLd + c) = l01;
      *reinterpret_cast<__nv_bfloat162*>(a_lo + r * kLd + c + 2) = l23;
    }
    // B: 64 columns x 32 bf16 = 256 uint4, 2 per thread (per matrix).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + i * kThreads;
      const int n = idx / 4, c = (idx % 4) * 8;
      const bool ok = n_base + n < N;
      uint4 v1 = make_uint4(0, 0, 0, 0), v2 = make_uint4(0, 0, 0, 0);
      if (ok) v1 = *reinterpret_cast<const uint4*>(w1e + static_cast<int64_t>(n_base + n) * K + k0 + c);
      *reinterpret_cast<uint4*>(b1_s + n * kLd + c) = v1;
      if (kGateUp) {
        if (ok) v2 = *reinterpret_cast<const uint4*>(w2e + static_cast<int64_t>(n_base + n) * K + k0 + c);
        *reinterpret_cast<uint4*>(b2_s + n * kLd + c) = v2;
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        load_a(ah[i], a_hi, wm + 16 * i, kk, lane);
        if (kSplit) load_a(al[i], a_lo, wm + 16 * i, kk, lane);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t b[2];
        load_b(b, b1_s, wn + 8 * j, kk, lane);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16(acc1[i][j], ah[i], b);
          if (kSplit) mma_bf16(acc1[i][j], al[i], b);
        }
        if (kGateUp) {
          load_b(b, b2_s, wn + 8 * j, kk, lane);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            mma_bf16(acc2[i][j], ah[i], b);
            if (kSplit) mma_bf16(acc2[i][j], al[i], b);
          }
        }
      }
    }
    __syncthreads();
  }

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm + 16 * i + g + 8 * half;
      if (r >= nr) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = n_base + wn + 8 * j + 2 * t;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (n + c >= N) continue;
          float v = acc1[i][j][2 * half + c];
          if (kGateUp) {
            float gv = v, uv = acc2[i][j][2 * half + c];
            if (limit > 0.0f) {
              gv = fminf(gv, limit);
              uv = fminf(fmaxf(uv, -limit), limit);
            }
            v = gv / (1.0f + expf(-gv)) * uv;
          }
          out[static_cast<int64_t>(row0 + r) * N + n + c] = v;
        }
      }
    }
  }
}

template <bool kGateUp>
void launch_mma(bool split, const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int64_t pairs,
                int64_t E, int64_t K, int64_t N, float limit) {
  DSI_CHECK(moe_mma_supported(K, reinterpret_cast<uintptr_t>(a), w1.base, w1.stride) &&
                (!kGateUp || moe_mma_supported(K, 0, w2.base, w2.stride)),
            "moe_experts: operands the tensor-core kernel cannot take");
  if (pairs == 0 || N == 0) return;
  const int64_t max_tiles = (pairs + kBM - 1) / kBM + E;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((N + kBN - 1) / kBN));
  const int iE = static_cast<int>(E), iK = static_cast<int>(K), iN = static_cast<int>(N);
  if (split) {
    launch_pdl(moe_mma_kernel<kGateUp, true>, grid, kThreads, 0, a, topk, offsets, tiles, slot_pair, w1, w2,
               out, iE, iK, iN, limit);
  } else {
    launch_pdl(moe_mma_kernel<kGateUp, false>, grid, kThreads, 0, a, topk, offsets, tiles, slot_pair, w1, w2,
               out, iE, iK, iN, limit);
  }
  check_launch(kGateUp ? "moe gate/up (tensor cores)" : "moe down (tensor cores)");
}

}  // namespace

bool moe_mma_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride) {
  return K % kBK == 0 && a % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && stride % 8 == 0;
}

void launch_moe_gate_up_mma(bool split, const float* x, int64_t k, const int32_t* offsets,
                            const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                            StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                            float limit) {
  launch_mma<true>(split, x, static_cast<int>(k), offsets, tiles, slot_pair, gate, up, act, pairs, E, H, I,
                   limit);
}

void launch_moe_down_mma(bool split, const float* act, const int32_t* offsets, const int32_t* tiles,
                         StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I) {
  launch_mma<false>(split, act, 1, offsets, tiles, nullptr, down, StackedWeights{}, y, pairs, E, I, H, 0.0f);
}

}  // namespace dsinfer::cuda
