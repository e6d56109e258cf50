// CPU reference of DeepSeek-V3.2's lightning indexer: causal index scores over the cached indexer keys and
// the top-k cache positions per query token.
//
// Exact score ties are common (a key whose q . k is <= 0 for every head scores exactly 0), so which tied
// key is kept changes the model's output. We break ties as the reference (transformers, eager, CPU) does:
// torch.topk over a row holding every key of the forward pass, future keys masked to -FLT_MAX, which is
// std::nth_element (or std::partial_sort when 64 * k <= row length) on (score, index) pairs. The row length
// is the sequence's length after its whole prompt (plan.prompt_lens), so chunked prefill selects exactly
// what a one-shot prefill does. IndexTies::kLowestPosition keeps the lowest positions among the tied keys
// instead (torch.topk on CUDA; what the CUDA backend does), whatever the row length.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "backend/cpu/cpu_attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

namespace {

using ScoredKey = std::pair<double, int64_t>;  // (score, position), as torch's CPU topk queues them

// torch.topk(largest=True) selection on `row`: the first k entries afterwards are the chosen ones.
void torch_cpu_topk(std::vector<ScoredKey>& row, int64_t k) {
  auto greater = [](const ScoredKey& x, const ScoredKey& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  const int64_t n = static_cast<int64_t>(row.size());
  if (k * 64 <= n) {
    std::partial_sort(row.begin(), row.begin() + k, row.end(), greater);
  } else {
    std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), greater);
  }
}

}  // namespace

Tensor CpuBackend::dsa_indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache,
                                    int64_t layer, const BatchPlan& plan, float scale, float weight_scale,
                                    int64_t top_k) {
  // q [T, Hi, D], weights [T, Hi]; cache rows of `layer` [D] -> positions [T, top_k] (I32)
  const int64_t T = q.dim(0), Hi = q.dim(1), D = q.dim(2);
  DSI_CHECK(weights.ndim() == 2 && weights.dim(0) == T && weights.dim(1) == Hi, "indexer_topk: weights ",
            shape_str(weights.shape()), " do not match q ", shape_str(q.shape()));
  DSI_CHECK(cache.width(layer) == D, "indexer_topk: cache row width ", cache.width(layer), " != ", D);
  DSI_CHECK(top_k > 0, "indexer_topk: top_k must be positive");
  const std::vector<int32_t> seq_of = cpu::token_seq(plan);
  Tensor out = Tensor::empty(DType::I32, {T, top_k});  // [T, top_k]
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = seq_of[t];
    const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;  // visible positions [0, n)
    int32_t* sel = out.data<int32_t>() + t * top_k;
    int64_t chosen = 0;
    if (n <= top_k) {
      for (; chosen < n; ++chosen) sel[chosen] = static_cast<int32_t>(chosen);
    } else {
      const int64_t row_len = std::max<int64_t>(plan.context_lens[s], plan.prompt_len(s));
      std::vector<ScoredKey> row(row_len);  // [row_len]
      const float* w = weights.f32() + t * Hi;
      for (int64_t j = 0; j < row_len; ++j) {
        float score = -std::numeric_limits<float>::max();  // future key: index score + finfo.min
        if (j < n) {
          const float* k = cache.slot(layer, plan.slot_of(s, j));
          score = 0.0f;
          for (int64_t h = 0; h < Hi; ++h) {
            const float qk = cpu::dot(q.f32() + (t * Hi + h) * D, k, D) * scale;
            score += (w[h] * weight_scale) * std::max(qk, 0.0f);
          }
        }
        row[j] = {score, j};
      }
      const int64_t k = std::min(top_k, row_len);
      if (index_ties_ == IndexTies::kLowestPosition) {
        std::partial_sort(row.begin(), row.begin() + k, row.end(),
                          [](const ScoredKey& x, const ScoredKey& y) {
                            const bool xn = std::isnan(x.first), yn = std::isnan(y.first);
                            if (xn != yn) return xn;
                            return (!xn && x.first != y.first) ? x.first > y.first : x.second < y.second;
                          });
      } else {
        torch_cpu_topk(row, k);
      }
      for (int64_t i = 0; i < k; ++i) {
        if (row[i].second < n) sel[chosen++] = static_cast<int32_t>(row[i].second);
      }
      std::sort(sel, sel + chosen);
    }
    std::fill(sel + chosen, sel + top_k, -1);
  }
  return out;
}

}  // namespace dsinfer
