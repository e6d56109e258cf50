// The routing rule's arithmetic: selection scores as the CPU reference computes them (mirrors
// backend/cpu/cpu_moe_route.cpp), their noise reach, and the judgement of one flipped decision (see
// routing_margin.h for the statement and its justification).
#include "engine/routing_margin.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {
namespace {

// Indices of the k largest values (ties: lower index first), in descending order: the reference's rule.
template <typename T>
std::vector<int32_t> top_k(const std::vector<T>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

// The score function applied to one logit, in double: for softmax exp(l - mx) / sum (normaliser fixed).
double score_of(double l, const std::string& scoring, double mx, double sum) {
  if (scoring == "sigmoid") return 1.0 / (1.0 + std::exp(-l));
  if (scoring == "sqrtsoftplus") return std::sqrt(l > 20.0 ? l : std::log1p(std::exp(l)));
  return std::exp(l - mx) / sum;  // softmax
}

// A group's score from expert values v [E] (group g of `per` experts), as the reference ranks groups.
double group_score(const std::vector<double>& v, int64_t g, int64_t per, const std::string& method) {
  std::vector<double> grp(v.begin() + g * per, v.begin() + (g + 1) * per);
  if (method == "group_limited_greedy") return *std::max_element(grp.begin(), grp.end());
  double s = 0.0;  // noaux_tc: the sum of the group's top-2
  for (int32_t i : top_k(grp, 2)) s += grp[i];
  return s;
}

bool has_groups(const RoutingParams& p) {
  return p.method != "greedy" && p.n_group > 1;
}

}  // namespace

nlohmann::json RoutingFlip::to_json() const {
  return {{"token", token}, {"layer", layer},   {"level", level}, {"margin", margin},
          {"bound", bound}, {"within", within}, {"out", out},     {"in", in}};
}

std::vector<float> router_logits(const Tensor& x, const Tensor& router) {
  DSI_CHECK(x.is_cpu() && router.is_cpu() && x.dtype() == DType::F32 && router.dtype() == DType::F32,
            "routing margin: the router input and weight must be float32 host tensors (the CPU reference)");
  const int64_t T = x.dim(0), H = x.dim(1), E = router.dim(0);
  DSI_CHECK(router.dim(1) == H, "routing margin: router expects ", router.dim(1), " features, got ", H);
  std::vector<float> logits(T * E);  // [T, E]
  cpu::gemm_nt(T, E, H, x.f32(), H, router.f32(), H, logits.data(), E);
  return logits;
}

RoutingScores routing_scores(const float* logits, const float* x_row, const Tensor& router,
                             const Tensor& bias, const RoutingParams& p) {
  const int64_t E = router.dim(0), H = router.dim(1);
  RoutingScores s;
  // Scores in float exactly as the reference computes them (so its ranking and ties are reproduced).
  std::vector<float> f(logits, logits + E);
  float mx = *std::max_element(f.begin(), f.end()), sum = 0.0f;
  if (p.scoring == "softmax") {
    for (float& v : f) sum += (v = std::exp(v - mx));
    for (float& v : f) v /= sum;
  } else if (p.scoring == "sigmoid") {
    for (float& v : f) v = 1.0f / (1.0f + std::exp(-v));
  } else if (p.scoring == "sqrtsoftplus") {
    for (float& v : f) v = std::sqrt(v > 20.0f ? v : std::log1p(std::exp(v)));
  } else {
    fail("routing margin: unsupported scoring function ", p.scoring);
  }
  const bool biased = p.method == "noaux_tc" && bias;
  if (biased) {
    DSI_CHECK(bias.is_cpu() && bias.dtype() == DType::F32 && bias.numel() == E,
              "routing margin: the bias must be float32 [", E, "] on the host");
    for (int64_t e = 0; e < E; ++e) f[e] += bias.f32()[e];
  }
  // Noise reach: delta_e = u |w_e| |x| of logit, through the score function (normaliser fixed).
  double x2 = 0.0;
  for (int64_t i = 0; i < H; ++i) x2 += static_cast<double>(x_row[i]) * x_row[i];
  double dmx = -INFINITY, dsum = 0.0;
  for (int64_t e = 0; e < E; ++e) dmx = std::max(dmx, static_cast<double>(logits[e]));
  for (int64_t e = 0; e < E; ++e) dsum += std::exp(logits[e] - dmx);
  s.score.resize(E);
  s.up.resize(E);
  s.down.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const float* w = router.f32() + e * H;
    double w2 = 0.0;
    for (int64_t i = 0; i < H; ++i) w2 += static_cast<double>(w[i]) * w[i];
    const double delta = kBf16UnitRoundoff * std::sqrt(w2 * x2), l = logits[e];
    const double c = score_of(l, p.scoring, dmx, dsum);
    s.score[e] = f[e];
    s.up[e] = score_of(l + delta, p.scoring, dmx, dsum) - c;
    s.down[e] = c - score_of(l - delta, p.scoring, dmx, dsum);
  }
  // Groups: the reference's kept groups and each group score's reach.
  const int64_t G = has_groups(p) ? p.n_group : 1;
  DSI_CHECK(E % G == 0, "routing margin: ", E, " experts do not split into ", G, " groups");
  s.per_group = E / G;
  s.group.assign(G, 0.0);
  s.group_up.assign(G, 0.0);
  s.group_down.assign(G, 0.0);
  if (G > 1) {
    std::vector<double> hi(E), lo(E);
    for (int64_t e = 0; e < E; ++e) {
      hi[e] = s.score[e] + s.up[e];
      lo[e] = s.score[e] - s.down[e];
    }
    std::vector<float> gf(G);
    for (int64_t g = 0; g < G; ++g) {
      // The group score in float, summed as the reference sums it (for its ranking).
      std::vector<float> grp(f.begin() + g * s.per_group, f.begin() + (g + 1) * s.per_group);
      if (p.method == "group_limited_greedy") {
        gf[g] = *std::max_element(grp.begin(), grp.end());
      } else {
        float sum2 = 0.0f;
        for (int32_t i : top_k(grp, 2)) sum2 += grp[i];
        gf[g] = sum2;
      }
      s.group[g] = gf[g];
      s.group_up[g] =
          group_score(hi, g, s.per_group, p.method) - group_score(s.score, g, s.per_group, p.method);
      s.group_down[g] =
          group_score(s.score, g, s.per_group, p.method) - group_score(lo, g, s.per_group, p.method);
    }
    s.kept_groups = top_k(gf, p.topk_group);
  } else {
    s.kept_groups = {0};
  }
  // The reference's selection: top-k over the kept groups' experts, the others masked to 0 (not -inf).
  std::vector<float> masked(E, 0.0f);
  for (int32_t g : s.kept_groups) {
    for (int64_t i = 0; i < s.per_group; ++i) masked[g * s.per_group + i] = f[g * s.per_group + i];
  }
  s.selected = top_k(masked, p.top_k);
  return s;
}

RoutingFlip judge_routing_flip(const RoutingScores& s, const int32_t* reference_ids,
                               const int32_t* tested_ids, int64_t k) {
  const int64_t E = static_cast<int64_t>(s.score.size()), per = s.per_group;
  RoutingFlip f;
  std::vector<int32_t> ref(reference_ids, reference_ids + k), tst(tested_ids, tested_ids + k);
  std::sort(ref.begin(), ref.end());
  std::sort(tst.begin(), tst.end());
  for (int32_t e : ref) {
    if (!std::binary_search(tst.begin(), tst.end(), e)) f.out.push_back(e);
  }
  for (int32_t e : tst) {
    if (!std::binary_search(ref.begin(), ref.end(), e)) f.in.push_back(e);
  }
  const bool valid = std::all_of(tst.begin(), tst.end(), [&](int32_t e) { return e >= 0 && e < E; }) &&
                     std::all_of(ref.begin(), ref.end(), [&](int32_t e) { return e >= 0 && e < E; }) &&
                     std::adjacent_find(tst.begin(), tst.end()) == tst.end();
  if (!valid) {
    f.level = "invalid";
    f.margin = std::numeric_limits<double>::infinity();
    f.bound = 0.0;
    f.within = false;
    return f;
  }
  // The pair that exceeds its bound most decides; every pair must be within.
  double worst = -std::numeric_limits<double>::infinity();
  auto consider = [&](const char* level, double margin, double bound) {
    if (margin - bound > worst) {
      worst = margin - bound;
      f.level = level;
      f.margin = margin;
      f.bound = bound;
    }
  };
  // Group level: groups the tested took experts from that the reference did not keep.
  auto kept = [&](int64_t g) {
    return std::find(s.kept_groups.begin(), s.kept_groups.end(), g) != s.kept_groups.end();
  };
  std::vector<int32_t> groups_in, groups_free;  // taken in; kept but with none of the tested experts
  for (int32_t e : tst) {
    const int32_t g = static_cast<int32_t>(e / per);
    if (!kept(g) && std::find(groups_in.begin(), groups_in.end(), g) == groups_in.end())
      groups_in.push_back(g);
  }
  for (int32_t g : s.kept_groups) {
    bool used = false;
    for (int32_t e : tst) used = used || e / per == g;
    if (!used) groups_free.push_back(g);
  }
  // The tested dropped as many kept groups as it took in; the cheapest for it: the weakest free ones.
  std::sort(groups_free.begin(), groups_free.end(),
            [&](int32_t a, int32_t b) { return s.group[a] < s.group[b]; });
  if (groups_in.size() > groups_free.size()) {
    f.level = "invalid";  // more groups than topk_group: no noise explains it
    f.margin = std::numeric_limits<double>::infinity();
    f.within = false;
    return f;
  }
  std::vector<int32_t> dropped(groups_free.begin(), groups_free.begin() + groups_in.size());
  for (int32_t h : groups_in) {
    for (int32_t d : dropped) consider("group", s.group[d] - s.group[h], s.group_down[d] + s.group_up[h]);
  }
  // Expert level: each expert taken in must overtake each expert dropped from a group the tested kept.
  for (int32_t a : f.out) {
    if (std::find(dropped.begin(), dropped.end(), a / per) != dropped.end()) continue;
    for (int32_t b : f.in) consider("expert", s.score[a] - s.score[b], s.down[a] + s.up[b]);
  }
  if (f.level.empty()) {  // the same set: nothing flipped
    f.level = "expert";
    f.within = true;
    return f;
  }
  f.within = worst <= 0.0 && std::isfinite(f.margin);
  return f;
}

}  // namespace dsinfer
