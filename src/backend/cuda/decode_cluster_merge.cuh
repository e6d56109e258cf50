// The merge of split-KV decode partials inside a thread block cluster (Hopper): when the splits of one
// (query, head chunk) are the CTAs of one cluster, each CTA stores each of its split's outputs into the
// shared memory of the CTA that merges that output (rank idx / per, per = ceil(gc * D / splits)) and its
// log2-sum-exp values into every CTA's (distributed shared memory). After one cluster barrier (release /
// acquire) every CTA merges its own slice from its own shared memory. No partials go to global memory, no
// arrival atomic sits between the last split and the merged output, nothing is read remotely and no second
// barrier is needed (every store into a CTA's shared memory is made before the barrier that CTA waits on).
// The arithmetic is decode_merge.cuh's (the same weights, the same butterfly order of their sum, one fma per
// split in split order), so both merges give the same bits. Included by the decode kernels only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>

namespace dsinfer::cuda::detail {

inline constexpr int kMaxClusterSplits = 8;  // the portable cluster size

// w[s] = 2^(lse_s - max) (0 for a split that saw no position) and 1 / sum_s w_s, by one thread, with the
// sum in the order of split_weights's 32-lane butterfly (lanes at or past `splits` add zeros, which is
// exact).
__device__ __forceinline__ float split_weights_serial(const float (&l)[kMaxClusterSplits], int splits,
                                                      float (&w)[kMaxClusterSplits]) {
  float mx = -INFINITY;
#pragma unroll
  for (int s = 0; s < kMaxClusterSplits; ++s)
    if (s < splits) mx = fmaxf(mx, l[s]);
  float v[kMaxClusterSplits];
#pragma unroll
  for (int s = 0; s < kMaxClusterSplits; ++s) {
    w[s] = s < splits && l[s] != -INFINITY ? exp2f(l[s] - mx) : 0.0f;
    v[s] = w[s];
  }
  // Butterfly levels 16 and 8 pair these lanes with lanes holding zeros; then 4, 2, 1.
#pragma unroll
  for (int o = kMaxClusterSplits / 2; o > 0; o /= 2)
#pragma unroll
    for (int s = 0; s < o; ++s) v[s] = v[s] + v[s + o];
  return 1.0f / v[0];
}

// A CTA's inbox. The kernel calls cluster_arrive_relaxed() at its start and cluster_wait_started() before its
// first remote store, so that no store targets a CTA that has not started.
template <int GMAX, int D>
struct ClusterInbox {
  float part[GMAX * D + kMaxClusterSplits];  // [split][per] (per * splits <= GMAX * D + splits - 1)
  float lse[kMaxClusterSplits][GMAX];
};

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

__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The outputs each rank owns in the push form.
__host__ __device__ __forceinline__ int cluster_push_per(int gc, int D, int splits) {
  return (gc * D + splits - 1) / splits;
}

// Sends output idx = g * D + d (value v) of split `split` to its owner, and, when d == 0, head g's lse value
// to every rank.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push(ClusterInbox<GMAX, D>& inbox, int split, int splits, int per,
                                             int idx, float v, float lse) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int owner = idx / per;
  *cluster.map_shared_rank(&inbox.part[split * per + idx % per], owner) = v;
  if (idx % D == 0)
    for (int r = 0; r < splits; ++r) *cluster.map_shared_rank(&inbox.lse[split][idx / D], r) = lse;
#else
  (void)inbox, (void)split, (void)splits, (void)per, (void)idx, (void)v, (void)lse;
  __trap();
#endif
}

// Sends -inf lse values for the gc heads (a split past the context: its outputs are never weighted).
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push_empty(ClusterInbox<GMAX, D>& inbox, int split, int splits,
                                                   int gc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = threadIdx.x; i < gc * splits; i += blockDim.x)
    *cluster.map_shared_rank(&inbox.lse[split][i / splits], i % splits) = -INFINITY;
#else
  (void)inbox, (void)split, (void)splits, (void)gc;
  __trap();
#endif
}

// After every push of this CTA: the barrier, then this rank's slice merged into out_row.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push_merge(ClusterInbox<GMAX, D>& inbox, int splits, int gc, int h0,
                                                   float* out_row) {
  cluster_arrive_release();
  cluster_wait_acquire();
  const int per = cluster_push_per(gc, D, splits);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  const int rank = 0;
#endif
  for (int j = threadIdx.x; j < per && rank * per + j < gc * D; j += blockDim.x) {
    const int idx = rank * per + j, g = idx / D, d = idx % D;
    float l[kMaxClusterSplits], v[kMaxClusterSplits], w[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      l[s] = s < splits ? inbox.lse[s][g] : -INFINITY;
      v[s] = s < splits ? inbox.part[s * per + j] : 0.0f;
    }
    const float inv = split_weights_serial(l, splits, w);
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits && w[s] != 0.0f) acc = fmaf(w[s], v[s], acc);
    out_row[static_cast<int64_t>(h0 + g) * D + d] = acc * inv;
  }
}

}  // namespace dsinfer::cuda::detail
