// Hopper asynchronous-copy plumbing for producer / consumer kernels (mla_wgmma_tma_kernels.cu): shared-memory
// mbarriers (init, arrive, arrive with an expected byte count, parity wait), tensor-memory-access (TMA) tile
// loads that complete on an mbarrier, and named barriers between warpgroups. The instructions exist in the
// sm_90a cubin only (DSINFER_WGMMA, wgmma_common.cuh); elsewhere they trap, and the host launches the kernels
// that use them only on the Hopper path.
#pragma once

#include <cstdint>

#include "backend/cuda/wgmma_common.cuh"

namespace dsinfer::cuda::tma {

// mbarrier at shared byte address bar expecting `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#ifdef DSINFER_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar;
  (void)count;
  __trap();
#endif
}

// Makes the initialised mbarriers visible to the other threads and to the async proxy (the TMA unit); the
// block synchronises after it.
__device__ __forceinline__ void mbar_init_fence() {
#ifdef DSINFER_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// One arrival that also raises the phase's expected transaction bytes by `bytes` (the TMA loads it waits
// for).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef DSINFER_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  (void)bar;
  (void)bytes;
  __trap();
#endif
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifdef DSINFER_WGMMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed (its arrivals and transaction bytes).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef DSINFER_WGMMA
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)bar;
  (void)parity;
  __trap();
#endif
}

// TMA load of the 2-D box at element coordinates (x = column, y = row) of the tensor map `map` (a
// __grid_constant__ kernel parameter) into shared byte address dst; completes `bar`'s transaction bytes.
__device__ __forceinline__ void load_2d(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
#ifdef DSINFER_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
#else
  (void)dst;
  (void)map;
  (void)x;
  (void)y;
  (void)bar;
  __trap();
#endif
}

// Fetches the tensor map's descriptor (a __grid_constant__ kernel parameter) ahead of the first load.
__device__ __forceinline__ void prefetch_map(const void* map) {
#ifdef DSINFER_WGMMA
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  (void)map;
  __trap();
#endif
}

// Named barrier `id` (1-15; 0 is __syncthreads) over `threads` threads (a multiple of 32): wait for all of
// them, or only count this warp's arrival.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace dsinfer::cuda::tma
