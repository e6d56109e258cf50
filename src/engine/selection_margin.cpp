// The selection rule's arithmetic: one index score as the CPU reference computes it (mirrors
// backend/cpu/cpu_indexer.cpp and cpu_v4_attention.cpp's indexer_topk), its noise reach, and the judgement
// of one differing selection (see selection_margin.h for the statement).
#include "engine/selection_margin.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "engine/routing_margin.h"

namespace dsinfer {
namespace {

// Sequence of token t in the plan.
int32_t seq_of_token(const BatchPlan& plan, int64_t t) {
  for (int32_t s = 0; s < plan.num_seqs(); ++s)
    if (t < plan.cu_seqlens[s + 1]) return s;
  DSI_CHECK(false, "selection margin: token ", t, " is not in the plan");
  return -1;
}

// Key rows visible to token t: j < (position + 1) / ratio.
int64_t visible_rows(const IndexScoreInputs& in, int64_t t) {
  return (static_cast<int64_t>(in.plan->positions[t]) + 1) / in.ratio;
}

}  // namespace

nlohmann::json SelectionFlip::to_json() const {
  return {{"token", token}, {"layer", layer},   {"level", level}, {"margin", margin},
          {"bound", bound}, {"within", within}, {"out", out},     {"in", in}};
}

double index_score(const IndexScoreInputs& in, int64_t t, int64_t j, double* reach) {
  DSI_CHECK(in.q.is_cpu() && in.weights.is_cpu() && in.q.dtype() == DType::F32 &&
                in.weights.dtype() == DType::F32 && in.cache && in.plan,
            "selection margin: the indexer inputs must be the CPU reference's float32 tensors");
  const int64_t H = in.q.dim(1), d = in.q.dim(2);
  DSI_CHECK(in.cache->width(in.entry) == d, "selection margin: key rows of ", in.cache->width(in.entry),
            " values, queries of ", d);
  DSI_CHECK(j >= 0 && j < visible_rows(in, t), "selection margin: row ", j, " is not visible to token ", t);
  const float* key = in.cache->slot(in.entry, in.plan->slot_of(seq_of_token(*in.plan, t), j));  // [d]
  double key_norm = 0.0;
  for (int64_t i = 0; i < d; ++i) key_norm += static_cast<double>(key[i]) * key[i];
  key_norm = std::sqrt(key_norm);
  const double u = kBf16UnitRoundoff, scale = in.scale;
  double score = 0.0, r_reach = 0.0;
  for (int64_t h = 0; h < H; ++h) {
    const float* q = in.q.f32() + (t * H + h) * d;  // [d]
    double dot = 0.0, q_norm = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      dot += static_cast<double>(q[i]) * key[i];
      q_norm += static_cast<double>(q[i]) * q[i];
    }
    const double a = static_cast<double>(in.weights.f32()[t * H + h]) * in.weight_scale;
    const double r = std::max(scale * dot, 0.0);
    score += a * r;
    r_reach += std::abs(a) * ((1 + u) * scale * (2 * u + u * u) * std::sqrt(q_norm) * key_norm + u * r);
  }
  if (reach) *reach = r_reach;
  return score;
}

SelectionFlip judge_selection_flip(const IndexScoreInputs& in, int64_t t,
                                   const std::vector<int32_t>& reference,
                                   const std::vector<int32_t>& tested) {
  SelectionFlip f;
  std::set_difference(reference.begin(), reference.end(), tested.begin(), tested.end(),
                      std::back_inserter(f.out));
  std::set_difference(tested.begin(), tested.end(), reference.begin(), reference.end(),
                      std::back_inserter(f.in));
  const int64_t visible = visible_rows(in, t);
  const bool repeated = std::adjacent_find(tested.begin(), tested.end()) != tested.end();
  const bool outside =
      std::any_of(f.in.begin(), f.in.end(), [&](int32_t j) { return j < 0 || j >= visible; });
  if (reference.size() != tested.size() || repeated || outside) {
    f.level = "invalid";
    f.margin = std::numeric_limits<double>::infinity();
    return f;
  }
  f.level = "rows";
  std::vector<double> out_score(f.out.size()), out_reach(f.out.size());
  for (size_t i = 0; i < f.out.size(); ++i) out_score[i] = index_score(in, t, f.out[i], &out_reach[i]);
  f.within = true;
  double worst = -std::numeric_limits<double>::infinity();
  for (int32_t b : f.in) {
    double reach_b = 0.0;
    const double score_b = index_score(in, t, b, &reach_b);
    for (size_t i = 0; i < f.out.size(); ++i) {
      const double margin = out_score[i] - score_b, bound = out_reach[i] + reach_b;
      f.within = f.within && margin <= bound;
      if (margin - bound > worst) {
        worst = margin - bound;
        f.margin = margin;
        f.bound = bound;
      }
    }
  }
  return f;
}

}  // namespace dsinfer
