// Checks of a GPU indexer's top-k selection against the CPU reference's (cuda_dsa_ops_test.cpp,
// cuda_v4_ops_test.cpp): the rows must be equal except where a key swapped in for another scores the same
// within float rounding (both are then valid top-k choices). Keys are the rows of cache layer 0, key j of
// sequence s in the slot of position j.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <vector>

#include "backend/batch_plan.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"

namespace dsinfer::deepseek_ops_test {

inline std::vector<int32_t> row_of(const Tensor& sel, int64_t t) {
  const int64_t K = sel.dim(1);
  return std::vector<int32_t>(sel.data<int32_t>() + t * K, sel.data<int32_t>() + (t + 1) * K);
}

// The index score of token t against the cached row `key` in double (the reference's formula).
inline double exact_score(const Tensor& q, const Tensor& w, const float* key, int64_t t, double scale,
                          double wscale) {
  const int64_t Hi = q.dim(1), D = q.dim(2);
  double score = 0.0;
  for (int64_t h = 0; h < Hi; ++h) {
    double dot = 0.0;
    for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(q.f32()[(t * Hi + h) * D + i]) * key[i];
    score += static_cast<double>(w.f32()[t * Hi + h]) * wscale * std::max(dot * scale, 0.0);
  }
  return score;
}

// GPU top-k rows equal the CPU's (lowest-position ties) except where a position swapped in for another
// scores the same within float rounding (both are then valid top-k choices).
inline void expect_same_selection(const Tensor& gpu, const Tensor& cpu, const Tensor& q, const Tensor& w,
                                  const KvCache& cache, const BatchPlan& plan, float scale, float wscale) {
  ASSERT_EQ(gpu.shape(), cpu.shape());
  int64_t swapped = 0;
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) {
      const std::vector<int32_t> g = row_of(gpu, t), c = row_of(cpu, t);
      if (g == c) continue;
      ASSERT_TRUE(std::is_sorted(g.begin(), g.begin() + (std::find(g.begin(), g.end(), -1) - g.begin())));
      std::vector<int32_t> only_g, only_c;
      std::set_difference(g.begin(), g.end(), c.begin(), c.end(), std::back_inserter(only_g));
      std::set_difference(c.begin(), c.end(), g.begin(), g.end(), std::back_inserter(only_c));
      ASSERT_EQ(only_g.size(), only_c.size()) << "token " << t;
      for (size_t i = 0; i < only_g.size(); ++i) {
        const double a = exact_score(q, w, cache.slot(0, plan.slot_of(s, only_g[i])), t, scale, wscale);
        const double b = exact_score(q, w, cache.slot(0, plan.slot_of(s, only_c[i])), t, scale, wscale);
        EXPECT_NEAR(a, b, 1e-5 * (1.0 + std::abs(b)))
            << "token " << t << " positions " << only_g[i] << " / " << only_c[i];
      }
      swapped += static_cast<int64_t>(only_g.size());
    }
  }
  if (swapped)
    std::printf("indexer top-k: %lld near-tie positions swapped\n", static_cast<long long>(swapped));
}

}  // namespace dsinfer::deepseek_ops_test
