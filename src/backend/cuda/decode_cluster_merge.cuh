// The merge of split-KV decode partials inside a thread block cluster (Hopper): when the splits of one
// (query, head chunk) are the CTAs of one cluster, each CTA sends each of its split's outputs to the CTA that
// merges that output (rank idx / per, per = ceil(gc * D / splits)) and its log2-sum-exp values to every CTA,
// by asynchronous stores into their shared memory (st.async) that count their bytes on the receiver's inbox
// mbarrier. A CTA merges its slice once its own inbox is full: no cluster barrier after the stores, no
// acknowledgement waited for, nothing read remotely. The arithmetic is decode_merge.cuh's (the same weights,
// the same butterfly order of their sum, one fma per split in split order), so both merges give the same
// bits. Included by the decode kernels only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cluster_common.cuh"
#include "backend/cuda/tma_common.cuh"

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

// A CTA's inbox: the outputs it merges from every split, every split's lse values, and the mbarrier their
// stores complete on. The kernel calls cluster_inbox_open() at its start and cluster_wait_started() before
// its first remote store, so that no store targets a CTA that has not started or an mbarrier not yet
// initialised.
template <int GMAX, int D>
struct ClusterInbox {
  float part[GMAX * D + kMaxClusterSplits];  // [split][per] (per * splits <= GMAX * D + splits - 1)
  float lse[kMaxClusterSplits][GMAX];
  alignas(8) uint64_t bar;
};

// The outputs each rank owns in the push form.
__host__ __device__ __forceinline__ int cluster_push_per(int gc, int D, int splits) {
  return (gc * D + splits - 1) / splits;
}

// Outputs rank `rank` merges.
__device__ __forceinline__ int cluster_owned(int gc, int D, int splits, int rank) {
  const int per = cluster_push_per(gc, D, splits);
  return max(0, min(per, gc * D - rank * per));
}

// At the kernel's start, by every thread: the inbox's mbarrier set to complete when every split's stores have
// landed (each split sends its part of the outputs this CTA merges, and its gc lse values), then the
// cluster's first, relaxed arrival (cluster_wait_started() waits for it).
template <int GMAX, int D>
__device__ __forceinline__ void cluster_inbox_open(ClusterInbox<GMAX, D>& inbox, int gc, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters are Hopper's (the launch takes this path there only); the helpers are no-ops below it
#endif
  if (threadIdx.x == 0) {
    const uint32_t bar = smem_addr(&inbox.bar);
    tma::mbar_init(bar, 1);
    tma::mbar_init_fence();
    const int owned = cluster_owned(gc, D, splits, cluster_rank());
    tma::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(splits * (owned + gc) * 4));
  }
  cluster_arrive_relaxed();
}

// Sends output idx = g * D + d (value v) of split `split` to its owner, and, when d == 0, head g's lse value
// to every rank.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push(ClusterInbox<GMAX, D>& inbox, int split, int splits, int per,
                                             int idx, float v, float lse) {
  const int owner = idx / per;
  const uint32_t bar = smem_addr(&inbox.bar);
  store_async(map_rank(smem_addr(&inbox.part[split * per + idx % per]), owner), v, map_rank(bar, owner));
  if (idx % D == 0) {
    const uint32_t at = smem_addr(&inbox.lse[split][idx / D]);
    for (int r = 0; r < splits; ++r) store_async(map_rank(at, r), lse, map_rank(bar, r));
  }
}

// A split past the context: zeros for its outputs (never weighted) and -inf lse values, so that every inbox
// receives the bytes it expects.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push_empty(ClusterInbox<GMAX, D>& inbox, int split, int splits,
                                                   int gc) {
  const int per = cluster_push_per(gc, D, splits);
  for (int idx = threadIdx.x; idx < gc * D; idx += blockDim.x)
    cluster_push<GMAX, D>(inbox, split, splits, per, idx, 0.0f, -INFINITY);
}

// After this CTA's pushes: waits for its own inbox, then merges its slice into out_row.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_push_merge(ClusterInbox<GMAX, D>& inbox, int splits, int gc, int h0,
                                                   float* out_row) {
  tma::mbar_wait(smem_addr(&inbox.bar), 0);
  const int per = cluster_push_per(gc, D, splits);
  const int rank = cluster_rank();
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
