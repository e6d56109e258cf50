// The merge of split-KV decode partials inside a thread block cluster (Hopper): when the splits of one
// (query, head chunk) are the CTAs of one cluster, each CTA leaves its split's outputs and log2-sum-exp
// values in its own shared memory, and after a cluster barrier every CTA merges a share of the outputs by
// reading the others' shared memory (distributed shared memory). No partials go to global memory and no
// arrival atomic or second L2 round trip sits between the last split and the merged output. The arithmetic is
// decode_merge.cuh's (the same weights, the same butterfly order of their sum, one fma per split in split
// order), so both merges give the same bits. Included by the decode kernels only.
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

// Called by every thread of every CTA of a cluster of `splits` CTAs (the splits of one query's head chunk,
// cluster rank = split), after the CTA stored its split's outputs part[g][d] (normalised) and lse[g]
// (log2-sum-exp, -inf for a split past the context) for its gc heads. Writes out_row[(h0 + g) * D + d]. Two
// cluster barriers: one before the reads, one so that no CTA leaves while others read its shared memory.
template <int GMAX, int D>
__device__ __forceinline__ void cluster_merge(float (&part)[GMAX][D], float (&lse)[GMAX], int gc, int h0,
                                              float* out_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  for (int idx = rank * blockDim.x + threadIdx.x; idx < gc * D; idx += splits * blockDim.x) {
    const int g = idx / D, d = idx % D;
    float l[kMaxClusterSplits], v[kMaxClusterSplits], w[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {  // every remote load in flight together
      l[s] = s < splits ? *cluster.map_shared_rank(&lse[g], s) : -INFINITY;
      v[s] = s < splits ? *cluster.map_shared_rank(&part[g][d], s) : 0.0f;
    }
    const float inv = split_weights_serial(l, splits, w);
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits && w[s] != 0.0f) acc = fmaf(w[s], v[s], acc);
    out_row[static_cast<int64_t>(h0 + g) * D + d] = acc * inv;
  }
  cluster.sync();
#else
  (void)part, (void)lse, (void)gc, (void)h0, (void)out_row;
  __trap();  // launched as a cluster only on the Hopper path
#endif
}

}  // namespace dsinfer::cuda::detail
