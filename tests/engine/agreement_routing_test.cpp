// Batch agreement's routing rule (engine/agreement_routing, engine/routing_log) on the CPU, where batched and
// one-at-a-time runs agree exactly, so the difference is planted: a hook changes the batched run's routing
// of one prompt at near ties (excused), at large margins (not excused), or only its weights (no flip: not
// excused); a dense model never goes through the rule.
#include "engine/agreement_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/batch_agreement.h"
#include "engine/routing_margin.h"

namespace dsinfer {
namespace {

enum class Plant { kNearTie, kLargeMargin, kWeightsOnly };

// Changes sequence `seq`'s routing in the batched run (in layer `only_layer`, or all MoE layers for -1):
// kNearTie swaps, at every decision that has one, the single-expert swap nearest to a tie when it is within
// bf16 noise; kLargeMargin the swap farthest above its bound, at every decision; kWeightsOnly doubles the
// routing weights and keeps the experts.
class PlantHook : public MoeRoutingHook {
 public:
  PlantHook(int64_t seq, Plant plant, int64_t only_layer = -1)
      : seq_(seq), plant_(plant), layer_(only_layer) {}
  void on_step(const BatchPlan& plan) override {
    rows_.clear();
    for (int32_t s = 0; s < plan.num_seqs(); ++s) {
      if (plan.seq_ids[s] != seq_) continue;
      for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t)
        rows_.push_back({t, plan.positions[t]});
    }
  }
  void on_router_input(Backend&, int64_t, const Tensor& x, const Tensor& router, const Tensor& bias,
                       const RoutingParams& p) override {
    x_ = x;
    router_ = router;
    bias_ = bias;
    p_ = p;
  }
  void on_route(Backend&, int64_t layer, Tensor& ids, Tensor& weights) override {
    if (rows_.empty() || (layer_ >= 0 && layer != layer_)) return;
    ids = ids.clone();
    weights = weights.clone();
    const std::vector<float> logits = router_logits(x_, router_);
    const int64_t k = ids.dim(1), E = router_.dim(0), H = x_.dim(1);
    for (const auto& [t, pos] : rows_) {
      int32_t* own = ids.data<int32_t>() + t * k;
      if (plant_ == Plant::kWeightsOnly) {
        for (int64_t j = 0; j < k; ++j) weights.f32()[t * k + j] *= 2.0f;
        continue;
      }
      const RoutingScores s = routing_scores(logits.data() + t * E, x_.f32() + t * H, router_, bias_, p_);
      std::vector<int32_t> best;
      double best_key = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        for (int32_t b = 0; b < E; ++b) {
          if (std::find(own, own + k, b) != own + k) continue;
          std::vector<int32_t> swapped(own, own + k);
          swapped[j] = b;
          const RoutingFlip f = judge_routing_flip(s, own, swapped.data(), k);
          const double key = plant_ == Plant::kNearTie ? f.margin / f.bound : -(f.margin - f.bound);
          if (plant_ == Plant::kNearTie && !f.within) continue;
          if (best.empty() || key < best_key) {
            best = swapped;
            best_key = key;
          }
        }
      }
      if (best.empty()) continue;
      std::copy(best.begin(), best.end(), own);
      planted.insert({pos, layer});
    }
    x_ = router_ = bias_ = Tensor();
  }
  std::set<std::pair<int64_t, int64_t>> planted;  // (position, layer)

 private:
  int64_t seq_;
  Plant plant_;
  int64_t layer_;
  std::vector<std::pair<int32_t, int32_t>> rows_;  // (row, position) of the sequence in this pass
  Tensor x_, router_, bias_;
  RoutingParams p_;
};

BatchAgreementOptions options(const std::string& model) {
  BatchAgreementOptions o;
  o.engine.model_dir = std::string(DSINFER_TEST_DATA) + "/models/" + model;
  o.engine.device = "cpu";
  o.engine.context_chunk_size = 16;  // prompts are prefilled in chunks next to other sequences' decodes
  o.engine.max_num_tokens = 64;
  o.prompts = 4;
  o.max_tokens = 8;
  o.prompt_len = 40;
  o.margin_rule = false;  // every difference goes to the routing rule
  o.routing_rule = "on";
  return o;
}

// Runs batch agreement with `plant` on prompt `p`; every other prompt must agree exactly.
BatchAgreementReport planted_run(int p, PlantHook& hook) {
  BatchAgreementOptions o = options("tiny-deepseek-v3");
  o.batched_routing_hook = &hook;
  BatchAgreementReport r = run_batch_agreement(o);
  EXPECT_TRUE(r.routing_rule);
  for (const BatchAgreementCase& c : r.cases) {
    if (c.index != p) {
      EXPECT_TRUE(c.exact) << "prompt " << c.index << " with the plant on prompt " << p;
    }
  }
  return r;
}

TEST(AgreementRoutingTest, NearTieFlipsAreExcused) {
  int differing = 0;
  for (int p = 0; p < 4; ++p) {
    PlantHook hook(p + 1, Plant::kNearTie);
    BatchAgreementReport r = planted_run(p, hook);
    const BatchAgreementCase& c = r.cases[p];
    if (c.exact) continue;  // the planted flips did not change this prompt's tokens
    ++differing;
    ASSERT_TRUE(c.routing_checked) << c.index;
    EXPECT_TRUE(c.excused_routing) << c.routing.reason;
    EXPECT_TRUE(c.routing.forced_match)
        << c.routing.reason;  // the CPU replays the batched arithmetic exactly
    EXPECT_EQ(c.routing.missing, 0);
    // The root flips are exactly the planted ones up to the first difference, each within its bound; the
    // free runs differ there too (and downstream of them, at any margin).
    const int64_t last = c.prompt_tokens - 1 + c.mismatch.step;
    std::set<std::pair<int64_t, int64_t>> expected;
    for (const auto& pl : hook.planted) {
      if (pl.first <= last) expected.insert(pl);
    }
    std::set<std::pair<int64_t, int64_t>> roots, found;
    for (const RoutingFlip& f : c.routing.forced_flips) {
      roots.insert({f.token, f.layer});
      EXPECT_TRUE(f.within) << "position " << f.token << " layer " << f.layer;
      EXPECT_LE(f.margin, f.bound);
    }
    for (const RoutingFlip& f : c.routing.flips) found.insert({f.token, f.layer});
    EXPECT_EQ(roots, expected);
    EXPECT_TRUE(std::includes(found.begin(), found.end(), expected.begin(), expected.end()));
    EXPECT_EQ(r.excused_routing, 1);
    EXPECT_DOUBLE_EQ(r.agreement_rate(), 1.0);
    const nlohmann::json j = r.to_json();
    EXPECT_EQ(j["excused_routing"], 1);
    EXPECT_EQ(j["differ"], 0);
    const nlohmann::json& cj = j["cases"][p];
    EXPECT_EQ(cj["excused_routing"], true);
    EXPECT_EQ(cj["routing_flips"]["count"], c.routing.flips.size());
    EXPECT_TRUE(cj["routing_flips"]["flips"][0].contains("position"));
    EXPECT_TRUE(cj["routing_flips"]["flips"][0].contains("bound"));
    EXPECT_EQ(cj["forced_flips"]["count"], c.routing.forced_flips.size());
    EXPECT_TRUE(cj.contains("reason"));
  }
  EXPECT_GE(differing, 1) << "no near-tie plant changed a prompt's tokens: the test plants nothing";
}

TEST(AgreementRoutingTest, LargeMarginFlipsAreNotExcused) {
  int differing = 0;
  for (int p = 0; p < 4; ++p) {
    PlantHook hook(p + 1, Plant::kLargeMargin);
    BatchAgreementReport r = planted_run(p, hook);
    const BatchAgreementCase& c = r.cases[p];
    if (c.exact) continue;
    ++differing;
    ASSERT_TRUE(c.routing_checked);
    EXPECT_FALSE(c.excused_routing);
    EXPECT_NE(c.routing.reason.find("not bf16 noise"), std::string::npos) << c.routing.reason;
    EXPECT_TRUE(std::any_of(c.routing.forced_flips.begin(), c.routing.forced_flips.end(),
                            [](const RoutingFlip& f) { return !f.within; }));
    EXPECT_EQ(r.excused_routing, 0);
    EXPECT_LT(r.agreement_rate(), 1.0);
  }
  EXPECT_GE(differing, 1) << "no large-margin plant changed a prompt's tokens: the test plants nothing";
}

TEST(AgreementRoutingTest, ADifferenceWithoutAFlipIsNotExcused) {
  PlantHook hook(2, Plant::kWeightsOnly, /*only_layer=*/2);  // the last layer: no later decision moves
  BatchAgreementReport r = planted_run(1, hook);
  const BatchAgreementCase& c = r.cases[1];
  ASSERT_FALSE(c.exact);
  ASSERT_TRUE(c.routing_checked);
  EXPECT_FALSE(c.excused_routing);
  EXPECT_TRUE(c.routing.flips.empty());
  EXPECT_GT(c.routing.decisions, 0);
  EXPECT_NE(c.routing.reason.find("no routing decision differs"), std::string::npos) << c.routing.reason;
  EXPECT_EQ(r.excused_routing, 0);
}

TEST(AgreementRoutingTest, OffAndAutoOnTheCpuNeverJudge) {
  for (const char* mode : {"off", "auto"}) {
    BatchAgreementOptions o = options("tiny-deepseek-v3");
    o.routing_rule = mode;
    BatchAgreementReport r = run_batch_agreement(o);
    EXPECT_FALSE(r.routing_rule) << mode;
    EXPECT_EQ(r.exact, 4) << mode;
    PlantHook hook(1, Plant::kLargeMargin);
    o.batched_routing_hook = &hook;  // a plant needs the rule
    EXPECT_THROW(run_batch_agreement(o), std::exception) << mode;
  }
}

TEST(AgreementRoutingTest, ADenseModelNeverGoesThroughTheRule) {
  BatchAgreementOptions o = options("tiny-llama");
  BatchAgreementReport r = run_batch_agreement(o);
  EXPECT_FALSE(r.routing_rule);
  EXPECT_EQ(r.exact, 4);
  EXPECT_EQ(r.excused_routing, 0);
  for (const BatchAgreementCase& c : r.cases) EXPECT_FALSE(c.routing_checked);
  EXPECT_EQ(r.to_json()["routing_rule"], false);
  PlantHook hook(1, Plant::kWeightsOnly);
  o.batched_routing_hook = &hook;
  EXPECT_THROW(run_batch_agreement(o), std::exception);
}

}  // namespace
}  // namespace dsinfer
