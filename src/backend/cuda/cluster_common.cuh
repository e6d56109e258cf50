// Thread block cluster primitives (Hopper) shared by the kernels that exchange values through distributed
// shared memory (decode_cluster_merge.cuh's split merge, moe_norm_route_kernels.cu's cluster routing): the
// cluster's start barrier, addresses in another CTA's shared memory, asynchronous remote stores that
// complete on the receiver's mbarrier, and the CTA's rank. No-ops (rank 0) below sm_90: the launches take
// the cluster paths on Hopper only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::detail {

// By every thread at the kernel's start: the cluster's first arrival, relaxed (cluster_wait_started() waits
// for it).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

// Before this CTA's first remote store: every CTA of the cluster has started (it arrived in
// cluster_arrive_relaxed at its start).
__device__ __forceinline__ void cluster_wait_started() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// The shared-memory address of a generic pointer to this CTA's shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The address in CTA `rank`'s shared memory of what sits at `local` in this CTA's.
__device__ __forceinline__ uint32_t map_rank(uint32_t local, int rank) {
  uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
#endif
  return remote;
}

// An asynchronous 4-byte store into another CTA's shared memory that completes on its mbarrier.
__device__ __forceinline__ void store_async(uint32_t remote, float v, uint32_t remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
               "r"(__float_as_uint(v)), "r"(remote_bar)
               : "memory");
#endif
}

// This CTA's rank in its cluster.
__device__ __forceinline__ int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return 0;
#endif
}

}  // namespace dsinfer::cuda::detail
