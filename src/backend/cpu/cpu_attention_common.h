// Helpers shared by the CPU attention kernels (dense, sparse, indexer): token -> sequence map and softmax.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/batch_plan.h"

namespace dsinfer::cpu {

// Maps each token of the plan to its sequence: [num_tokens].
inline std::vector<int32_t> token_seq(const BatchPlan& plan) {
  std::vector<int32_t> seq(plan.num_tokens());
  for (int32_t s = 0; s < plan.num_seqs(); ++s)
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) seq[t] = s;
  return seq;
}

// s[0..n) <- softmax(s[0..n)).
inline void softmax_inplace(float* s, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
}

}  // namespace dsinfer::cpu
