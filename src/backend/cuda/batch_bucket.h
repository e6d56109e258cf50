// The rounding that launch choices made from a batch's token count go through. A CUDA graph pads a decode
// batch of T tokens to a bucket b with T <= b <= next_pow2(T) (cuda_graph_model.cpp), so a choice made from
// next_pow2(T) is the same eagerly and in the graph: same kernels, same splits, same sums.
#pragma once

#include <cstdint>

namespace dsinfer::cuda {

// The smallest power of two >= n (1 for n <= 1).
inline int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace dsinfer::cuda
