// Shared-memory staging and mma.sync fragment loads of the MLA tensor-core kernels (mla_tc_kernels.cu,
// mla_tc_v2_kernels.cu, mla_prefill_kernels.cu): the decode kernels' Q fragments held in registers,
// cp.async 16-byte copies (zero-fill), and ldmatrix loads of A (row-major), B = tile^T (K rows for Q K^T) and
// B = tile (V rows for P V) fragments from bf16 tiles with a row stride of `ld` elements. sm_80 and newer;
// empty bodies below (the build also compiles host-side passes and older targets).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::frag {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; valid false zero-fills the destination (src not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
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

// Two B fragments (16 k x 8 n; b[0..1] for columns n0.., b[2..3] for n0 + 8..) of B = tile^T for a [n][ld]
// tile holding k contiguously (cached rows for S = Q K^T).
__device__ __forceinline__ void ldmatrix_bt(uint32_t* b, const __nv_bfloat16* tile, int ld, int n0, int k0,
                                            int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int idx = lane / 8, row = lane % 8;
  const unsigned addr = smem_addr(tile + (n0 + (idx / 2) * 8 + row) * ld + k0 + (idx % 2) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(addr));
#endif
}

// Two B fragments (16 k x 8 n, n tiles n0 and n0 + 8) of V = rows [k0, k0 + 16) of a [rows][ld] tile.
__device__ __forceinline__ void ldmatrix_v(uint32_t* b, const __nv_bfloat16* tile, int ld, int k0, int n0,
                                           int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int idx = lane / 8, row = lane % 8;
  const unsigned addr = smem_addr(tile + (k0 + (idx % 2) * 8 + row) * ld + n0 + (idx / 2) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(addr));
#endif
}

// The A fragments of S = Q K^T for one warp's k-steps k0 = 16 (warp + kWarps i), i < nk (<= 5) of the
// queries [16 heads, kR + kP] starting at head row `row0` (rows g and g + 8 of a fragment are heads; heads at
// or past hg read as zero): each fp32 value as bf16 hi, and with kLo its remainder as bf16 lo (else lo 0).
template <bool kLo, int kWarps, int kR, int kP>
__device__ __forceinline__ void load_q_fragments(const float* q_lat, const float* q_pe, int64_t row0, int hg,
                                                 int warp, int nk, int lane, uint32_t (&qh)[5][4],
                                                 uint32_t (&ql)[5][4]) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < 5; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int h = g + (r % 2) * 8, d = 16 * (warp + kWarps * i) + (r / 2) * 8 + 2 * tq;
      float2 v = make_float2(0.0f, 0.0f);
      if (i < nk && h < hg) {
        const int64_t row = row0 + h;
        v = *reinterpret_cast<const float2*>(d < kR ? q_lat + row * kR + d : q_pe + row * kP + (d - kR));
      }
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v.x, v.y);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x - __low2float(hi), v.y - __high2float(hi));
      qh[i][r] = *reinterpret_cast<const uint32_t*>(&hi);
      ql[i][r] = kLo ? *reinterpret_cast<const uint32_t*>(&lo) : 0u;
    }
  }
}

}  // namespace dsinfer::cuda::frag
