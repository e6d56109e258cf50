// Hopper asynchronous-copy plumbing for producer / consumer kernels (mla_wgmma_tma_kernels.cu,
// mla_tc_v2_kernels.cu; the proxy fence also for wgmma_common.cuh's users): shared-memory mbarriers at shared
// byte addresses (init, arrive, arrive with an expected byte count, parity wait), tensor-memory-access (TMA)
// tile loads that complete on an mbarrier, the generic-to-async proxy fence, and named barriers between
// warpgroups, and plain bulk copies into shared memory. The mbarrier and TMA instructions need sm_90;
// elsewhere they compile to nothing (the host launches the kernels that use them only on the Hopper path).
#pragma once

#include <cstdint>

namespace dsinfer::cuda::tma {

// mbarrier at shared byte address bar expecting `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

// Makes the initialised mbarriers visible to the async proxy (the copy engine's completions); the block
// synchronises after it.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also raises the phase's expected transaction bytes by `bytes` (the TMA loads it waits
// for).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Waits until the phase of parity `parity` has completed (its arrivals and transaction bytes).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
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
#endif
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src to this CTA's shared memory at
// shared byte address dst by the copy engine, completing on the mbarrier at bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// TMA load of the 2-D box at element coordinates (x = column, y = row) of the tensor map `map` (a
// __grid_constant__ kernel parameter) into shared byte address dst; completes `bar`'s transaction bytes.
__device__ __forceinline__ void load_2d(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
#endif
}

// Fetches the tensor map's descriptor (a __grid_constant__ kernel parameter) ahead of the first load.
__device__ __forceinline__ void prefetch_map(const void* map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// Orders this thread's earlier generic-proxy accesses of shared memory before later async-proxy ones (TMA,
// bulk copies, wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
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
