// Hopper warpgroup MMA (wgmma) building blocks shared by the kernels that use it (moe_wgmma_kernels.cu,
// mla_wgmma_tma_kernels.cu): the cp.async copies and swizzled offsets that fill their tiles, shared-memory
// matrix descriptors of the 128-byte-swizzle layouts (K-major and MN-major), the fence / commit / wait
// instructions, and the m64n128k16 and m64n32k16 bf16 MMAs with fp32 accumulators. The instructions exist in
// the sm_90a cubin only (DSINFER_WGMMA); elsewhere they trap, and the host launches these kernels only on the
// Hopper path.
//
// The 128-byte-swizzle layout: rows of 128 bytes (64 bf16), 16-byte chunk c of row r at c ^ (r % 8), atoms of
// 8 rows (1024 bytes, 1024-byte aligned). Read K-major (rows = M or N, 64 K values per row) or MN-major (rows
// = K, 64 M or N values per row): the same bytes serve both, e.g. a cache tile is K^T for Q K^T and V for P
// V.
#pragma once

#include <cstdint>

#include "backend/cuda/tma_common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSINFER_WGMMA 1
#endif

namespace dsinfer::cuda::wgmma {

// Byte offset of 16-byte chunk `chunk` of row `row` (128-byte rows) in the 128-byte-swizzle layout.
__device__ __forceinline__ uint32_t swizzled128(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// 16 bytes global -> shared (byte address dst), asynchronously (cp.async, sm_80 and newer): the copies that
// fill the swizzled tiles. valid false zero-fills the destination (src not read).
__device__ __forceinline__ void copy_async16(uint32_t dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Until at most N of this thread's most recent copy groups are pending.
template <int N>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Matrix descriptor of a K-major operand in the 128-byte-swizzle layout starting at shared address addr:
// start address >> 4 (bits 0-13), leading byte offset 16 (unused by swizzled K-major layouts; bits 16-29),
// stride byte offset 1024 between 8-row atoms (bits 32-45), base offset 0 (bits 49-51: atoms 1024-byte
// aligned), swizzle mode 1 = 128 bytes (bits 62-63).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (uint64_t{16 >> 4} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// The wgmma / async-proxy instructions exist in the sm_90a cubin only; elsewhere they trap (the host launches
// these kernels only on the Hopper path, which runs the sm_90a cubin).
__device__ __forceinline__ void wgmma_fence() {
#ifdef DSINFER_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef DSINFER_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef DSINFER_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
// Keeps the compiler from moving accesses of an accumulator across the wgmma fence/commit/wait points.
__device__ __forceinline__ void fence_operand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}
// The proxy fence before MMAs read shared memory written by generic stores: tma_common.cuh's.
using tma::fence_proxy_async;

// d[64] += A (64 x 16, descriptor da) * B (128 x 16, descriptor db)^T; both K-major (no transpose), scale-d
// true (accumulate), operands unscaled.
__device__ __forceinline__ void wgmma_m64n128k16(float* d, uint64_t da, uint64_t db) {
#ifdef DSINFER_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
#else
  (void)d;
  (void)da;
  (void)db;
  __trap();
#endif
}

// Matrix descriptor of an MN-major operand in the 128-byte-swizzle layout at shared address addr (1024-byte
// aligned): rows are consecutive K values, each holding 64 M (or N) values; stride byte offset 1024 between
// groups of 8 K rows, leading byte offset `mn_step` between blocks of 64 M values (unused when the MMA's M or
// N is 64), swizzle mode 1 = 128 bytes.
__device__ __forceinline__ uint64_t smem_desc_mn(uint32_t addr, uint32_t mn_step) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((mn_step >> 4) & 0x3FFFu) << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// d[16] += A (64 x 16, descriptor da; kTransA: MN-major, else K-major) * B (32 x 16, K-major descriptor
// db)^T. Accumulator fragment: warp w of the warpgroup holds rows 16w + lane/4 (+8 for registers 2, 3 of each
// group of 4), register i columns 8 (i / 4) + 2 (lane % 4) + i % 2.
template <int kTransA>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], uint64_t da, uint64_t db) {
#ifdef DSINFER_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, %19, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(1), "n"(kTransA));
#else
  (void)d;
  (void)da;
  (void)db;
  __trap();
#endif
}

}  // namespace dsinfer::cuda::wgmma
