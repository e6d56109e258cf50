// Tensor-core MLA over a bf16 latent cache (R = 512, P = 64, the DeepSeek-V2/V3 shape): one block per
// (query token, split of its context, group of 16 heads), 4 warps. Tiles of 64 cached rows stream through
// shared memory with cp.async (two stages), so the 16 heads read each cached byte once; scores
// S = Q K^T and the output O += P V run on mma.sync m16n8k16 (bf16 in, fp32 accumulate). Q and P are split
// into bf16 hi + lo halves (two MMAs each), so only the cache's own rounding remains. The partial states
// have the layout of the CUDA-core kernel (mla_kernels.cu), whose combine kernel merges splits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16, kNT = 64, kThreads = 128;
constexpr int kLdQ = kD + 8, kLdK = kD + 8, kLdP = kNT + 8;
constexpr int kChunks = kD * 2 / 16;  // 16-byte chunks per cached row

struct Smem {
  __nv_bfloat16 q_hi[kHeads * kLdQ], q_lo[kHeads * kLdQ];
  __nv_bfloat16 k[2][kNT * kLdK];
  __nv_bfloat16 p_hi[kHeads * kLdP], p_lo[kHeads * kLdP];
  float s[kHeads][kNT];
  float m[kHeads], l[kHeads], c[kHeads];
  int64_t slot[kNT];  // cache slot of each row of the tile being loaded (-1: past the end)
};

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The A fragment (16 x 16, rows r0.., columns k0..) of a row-major [rows][ld] bf16 tile.
__device__ __forceinline__ void ldmatrix_a(uint32_t* a, const __nv_bfloat16* tile, int ld, int r0, int k0,
                                           int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int idx = lane / 8, row = lane % 8;
  const unsigned addr = smem_addr(tile + (r0 + (idx % 2) * 8 + row) * ld + k0 + (idx / 2) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
#endif
}

// Two B fragments (16 k x 8 n; b[0..1] for columns n0.., b[2..3] for n0 + 8..) of B = tile^T for a
// [n][ld] tile holding k contiguously (the cached rows for S = Q K^T).
__device__ __forceinline__ void ldmatrix_bt(uint32_t* b, const __nv_bfloat16* tile, int n0, int k0,
                                            int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int idx = lane / 8, row = lane % 8;
  const unsigned addr = smem_addr(tile + (n0 + (idx / 2) * 8 + row) * kLdK + k0 + (idx % 2) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(addr));
#endif
}

// Two B fragments (16 k x 8 n, n tiles n0 and n0 + 8) of V = rows [k0, k0 + 16) of a [rows][kLdK] tile.
__device__ __forceinline__ void ldmatrix_v(uint32_t* b, const __nv_bfloat16* k_tile, int k0, int n0,
                                           int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int idx = lane / 8, row = lane % 8;
  const __nv_bfloat16* p = k_tile + (k0 + (idx % 2) * 8 + row) * kLdK + n0 + (idx / 2) * 8;
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(a));
#endif
}

__global__ void __launch_bounds__(kThreads)
    mla_tc_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan, float* out,
                  float* ws_acc, float* ws_ml, int H, float scale, int splits, int64_t chunk) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t t = blockIdx.x;
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * kHeads;
  const int hg = min(kHeads, H - h0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;
  const int64_t begin = split * chunk;
  const int64_t end = min(n, begin + chunk);
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  const int64_t bs = plan.block_size;

  auto load_tile = [&](int stage, int64_t j0) {  // called by the whole block
    __syncthreads();                             // earlier readers of sm.slot are done
    if (tid < kNT) {
      const int64_t pos = j0 + tid;
      sm.slot[tid] = pos < end ? static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs : -1;
    }
    __syncthreads();
#pragma unroll 4
    for (int i = tid; i < kNT * kChunks; i += kThreads) {
      const int j = i / kChunks, c = i % kChunks;
      const int64_t slot = sm.slot[j];
      cp_async16(sm.k[stage] + j * kLdK + c * 8, cache + (slot >= 0 ? slot : 0) * kD + c * 8, slot >= 0);
    }
    cp_async_commit();
  };
  if (begin < end) load_tile(0, begin);

  // Queries split into hi + lo (rows past the last head are zero).
  constexpr int kD4 = kD / 4;
#pragma unroll 6
  for (int i = tid; i < kHeads * kD4; i += kThreads) {
    const int h = i / kD4, d = (i % kD4) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h < hg) {
      const int64_t row = t * H + h0 + h;
      v = *reinterpret_cast<const float4*>(d < kR ? q_lat + row * kR + d : q_pe + row * kP + (d - kR));
    }
    const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const __nv_bfloat16 hi = __float2bfloat16_rn(vals[c]);
      sm.q_hi[h * kLdQ + d + c] = hi;
      sm.q_lo[h * kLdQ + d + c] = __float2bfloat16_rn(vals[c] - __bfloat162float(hi));
    }
  }
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  float acc[16][4];  // O [16 heads, this warp's 128 latent columns]
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  const int ntiles = begin < end ? static_cast<int>((end - begin + kNT - 1) / kNT) : 0;
  for (int it = 0; it < ntiles; ++it) {
    const int stage = it % 2;
    const int64_t j0 = begin + static_cast<int64_t>(it) * kNT;
    if (it + 1 < ntiles) {
      load_tile((it + 1) % 2, j0 + kNT);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* kt = sm.k[stage];
    // S [16, 64]: warp w scores positions [16w, 16w + 16) (two n tiles).
    {
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll 4
      for (int k0 = 0; k0 < kD; k0 += 16) {
        uint32_t ah[4], al[4], b[4];
        ldmatrix_a(ah, sm.q_hi, kLdQ, 0, k0, lane);
        ldmatrix_a(al, sm.q_lo, kLdQ, 0, k0, lane);
        ldmatrix_bt(b, kt, warp * 16, k0, lane);
        mma_bf16(s[0], ah, b);
        mma_bf16(s[0], al, b);
        mma_bf16(s[1], ah, b + 2);
        mma_bf16(s[1], al, b + 2);
      }
#pragma unroll
      for (int jn = 0; jn < 2; ++jn) {
        const int col = warp * 16 + jn * 8 + 2 * tq;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int h = g + (c / 2) * 8, j = col + c % 2;
          sm.s[h][j] = j0 + j < end ? s[jn][c] * scale : -INFINITY;
        }
      }
    }
    __syncthreads();
    // Online softmax: warp w updates heads [4w, 4w + 4), positions lane and lane + 32.
#pragma unroll
    for (int hh = 0; hh < 4; ++hh) {
      const int h = warp * 4 + hh;
      const float s0 = sm.s[h][lane], s1 = sm.s[h][lane + 32];
      float mx = fmaxf(s0, s1);
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, mx);
      const float p0 = s0 == -INFINITY ? 0.0f : expf(s0 - m_new);
      const float p1 = s1 == -INFINITY ? 0.0f : expf(s1 - m_new);
      float sum = p0 + p1;
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const __nv_bfloat16 hi0 = __float2bfloat16_rn(p0), hi1 = __float2bfloat16_rn(p1);
      sm.p_hi[h * kLdP + lane] = hi0;
      sm.p_lo[h * kLdP + lane] = __float2bfloat16_rn(p0 - __bfloat162float(hi0));
      sm.p_hi[h * kLdP + lane + 32] = hi1;
      sm.p_lo[h * kLdP + lane + 32] = __float2bfloat16_rn(p1 - __bfloat162float(hi1));
      __syncwarp();
      if (lane == 0) {
        const float corr = expf(m_old - m_new);
        sm.c[h] = corr;
        sm.l[h] = sm.l[h] * corr + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();
    // O [16, 512] += P [16, 64] V [64, 512]: warp w owns latent columns [128w, 128w + 128).
    {
      const float c_lo = sm.c[g], c_hi = sm.c[g + 8];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        acc[j][0] *= c_lo;
        acc[j][1] *= c_lo;
        acc[j][2] *= c_hi;
        acc[j][3] *= c_hi;
      }
#pragma unroll
      for (int k0 = 0; k0 < kNT; k0 += 16) {
        uint32_t ah[4], al[4];
        ldmatrix_a(ah, sm.p_hi, kLdP, 0, k0, lane);
        ldmatrix_a(al, sm.p_lo, kLdP, 0, k0, lane);
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
          uint32_t b[4];
          ldmatrix_v(b, kt, k0, warp * 128 + j * 8, lane);
          mma_bf16(acc[j], ah, b);
          mma_bf16(acc[j], al, b);
          mma_bf16(acc[j + 1], ah, b + 2);
          mma_bf16(acc[j + 1], al, b + 2);
        }
      }
    }
    __syncthreads();
  }

  // Rows g and g + 8 of the fragments are heads g and g + 8; columns 128w + 8j + 2tq (+1).
  const int64_t base = (t * splits + split) * H + h0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = g + 8 * half;
    if (h >= hg) continue;
    const float inv = splits == 1 ? 1.0f / sm.l[h] : 1.0f;
    float* dst = splits == 1 ? out + (t * H + h0 + h) * kR : ws_acc + (base + h) * kR;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int col = warp * 128 + j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(dst + col) = make_float2(acc[j][2 * half] * inv, acc[j][2 * half + 1] * inv);
    }
  }
  if (splits > 1 && tid < hg) {
    ws_ml[(base + tid) * 2] = sm.m[tid];
    ws_ml[(base + tid) * 2 + 1] = sm.l[tid];
  }
}

}  // namespace

bool mla_tc_supported(int64_t R, int64_t P, bool cache_bf16, uintptr_t cache, uintptr_t q_lat,
                      uintptr_t q_pe) {
  return cache_bf16 && R == kR && P == kP && cache % 16 == 0 && q_lat % 16 == 0 && q_pe % 16 == 0;
}

bool launch_attention_mla_tc(const float* q_lat, const float* q_pe, const uint16_t* cache,
                             const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml, int64_t T,
                             int64_t H, float scale, const MlaSplit& split) {
  // The tiles need ~196 KiB of shared memory: Hopper has it, an A100 (163 KiB) does not.
  static const bool fits = cudaFuncSetAttribute(mla_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(sizeof(Smem))) == cudaSuccess;
  if (!fits) {
    cudaGetLastError();
    return false;
  }
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(split.splits),
                  static_cast<unsigned>((H + kHeads - 1) / kHeads));
  mla_tc_kernel<<<grid, kThreads, sizeof(Smem), stream()>>>(
      q_lat, q_pe, cache, plan, out, ws_acc, ws_ml, static_cast<int>(H), scale, split.splits, split.chunk);
  check_launch("attention_mla (tensor cores)");
  return true;
}

}  // namespace dsinfer::cuda
