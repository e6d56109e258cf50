// The golden check's routing rule (engine/routing_margin, engine/routing_rule): the margin arithmetic on
// hand-made scores; the recomputed selection equals the CPU reference's; on tiny-deepseek-v3 a planted flip
// at the reference's nearest tie is excused, a planted flip with a large margin is not, a forced error above
// the tolerance is not; a dense model never goes through the rule.
#include "engine/routing_rule.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../fixture_models.h"
#include "../golden_files.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/golden_eval.h"
#include "engine/routing_check.h"
#include "engine/routing_margin.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "planted_model.h"

namespace dsinfer {
namespace {

Tensor from(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// --- the arithmetic ----------------------------------------------------------------------------------

// x = e_0 (|x| = 1), router row e = [l_e, 0]: logit l_e, |w_e| = |l_e|, so delta_e = 2^-8 |l_e|.
TEST(RoutingMarginTest, SigmoidBiasedScoresAndTheirReach) {
  const std::vector<float> l = {2.0f, 1.0f, 0.999f, -1.0f};
  std::vector<float> w;
  for (float v : l) w.insert(w.end(), {v, 0.0f});
  const Tensor router = from(w, {4, 2}), x = from({1.0f, 0.0f}, {1, 2});
  const Tensor bias = from({0.0f, 0.0f, 0.0f, 0.5f}, {4});
  RoutingParams p;
  p.scoring = "sigmoid";
  p.method = "noaux_tc";
  p.top_k = 2;
  const std::vector<float> logits = router_logits(x, router);
  const RoutingScores s = routing_scores(logits.data(), x.f32(), router, bias, p);
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(s.score[3], sig(-1.0) + 0.5, 1e-6);  // biased
  const double d1 = std::ldexp(1.0, -8) * 1.0;
  EXPECT_NEAR(s.up[1], sig(1.0 + d1) - sig(1.0), 1e-9);
  EXPECT_NEAR(s.down[1], sig(1.0) - sig(1.0 - d1), 1e-9);
  // Selection: 0 (0.881), then 3 (0.769 biased) over 1 (0.731) and 2.
  EXPECT_EQ(s.selected, (std::vector<int32_t>{0, 3}));
  // 3 -> 1: margin 0.038, far above a reach of ~2e-3: not within.
  const int32_t ref[2] = {0, 3}, far[2] = {0, 1};
  const RoutingFlip f = judge_routing_flip(s, ref, far, 2);
  EXPECT_EQ(f.out, (std::vector<int32_t>{3}));
  EXPECT_EQ(f.in, (std::vector<int32_t>{1}));
  EXPECT_EQ(f.level, "expert");
  EXPECT_NEAR(f.margin, s.score[3] - s.score[1], 1e-12);
  EXPECT_NEAR(f.bound, s.down[3] + s.up[1], 1e-12);
  EXPECT_FALSE(f.within);
  // Without the bias, 1 vs 2 is a near tie (logits 1.0 vs 0.999): choosing 2 for 1 is within noise.
  const RoutingScores u = routing_scores(logits.data(), x.f32(), router, Tensor(), p);
  EXPECT_EQ(u.selected, (std::vector<int32_t>{0, 1}));
  const int32_t uref[2] = {0, 1}, near[2] = {2, 0};
  const RoutingFlip g = judge_routing_flip(u, uref, near, 2);
  EXPECT_GT(g.margin, 0.0);
  EXPECT_LE(g.margin, g.bound);
  EXPECT_TRUE(g.within);
  // Repeated or out-of-range ids are never noise.
  const int32_t twice[2] = {0, 0}, outside[2] = {0, 7};
  EXPECT_FALSE(judge_routing_flip(u, uref, twice, 2).within);
  EXPECT_FALSE(judge_routing_flip(u, uref, outside, 2).within);
}

TEST(RoutingMarginTest, SoftmaxReachKeepsTheNormaliser) {
  const Tensor router = from({3.0f, 0.0f, 1.0f, 0.0f, 0.999f, 0.0f}, {3, 2}), x = from({1.0f, 0.0f}, {1, 2});
  RoutingParams p;
  p.scoring = "softmax";
  p.method = "greedy";
  p.top_k = 2;
  const std::vector<float> logits = router_logits(x, router);
  const RoutingScores s = routing_scores(logits.data(), x.f32(), router, Tensor(), p);
  const double z = std::exp(0.0) + std::exp(-2.0) + std::exp(-2.001), d = std::ldexp(1.0, -8);
  EXPECT_NEAR(s.score[1], std::exp(-2.0) / z, 1e-6);
  EXPECT_NEAR(s.up[1], std::exp(-2.0) / z * (std::exp(d) - 1.0), 1e-9);
  const int32_t ref[2] = {0, 1}, near[2] = {0, 2}, far[2] = {1, 2};
  EXPECT_TRUE(judge_routing_flip(s, ref, near, 2).within);
  EXPECT_FALSE(judge_routing_flip(s, ref, far, 2).within);
}

// Four groups of two experts, two kept; a flip that takes an expert from a dropped group is judged at the
// group level (group scores: the sum of the group's top 2).
TEST(RoutingMarginTest, GroupLevelFlip) {
  const std::vector<float> l = {2.0f, 1.9f, 1.0f, 0.9f, 0.5f, 0.4f, 1.0f, 0.8999f};
  std::vector<float> w;
  for (float v : l) w.insert(w.end(), {v, 0.0f});
  const Tensor router = from(w, {8, 2}), x = from({1.0f, 0.0f}, {1, 2});
  RoutingParams p;
  p.scoring = "sigmoid";
  p.method = "noaux_tc";
  p.top_k = 3;
  p.n_group = 4;
  p.topk_group = 2;
  const std::vector<float> logits = router_logits(x, router);
  const RoutingScores s = routing_scores(logits.data(), x.f32(), router, Tensor(), p);
  EXPECT_EQ(s.kept_groups, (std::vector<int32_t>{0, 1}));  // group 3 trails group 1 by a hair
  EXPECT_EQ(s.selected, (std::vector<int32_t>{0, 1, 2}));
  const int32_t ref[3] = {0, 1, 2}, via3[3] = {0, 1, 6}, via2[3] = {0, 1, 4};
  const RoutingFlip near = judge_routing_flip(s, ref, via3, 3);
  EXPECT_EQ(near.level, "group");
  EXPECT_NEAR(near.margin, s.group[1] - s.group[3], 1e-12);
  EXPECT_TRUE(near.within);
  const RoutingFlip far = judge_routing_flip(s, ref, via2, 3);
  EXPECT_FALSE(far.within);
}

// --- the reference's selection, recomputed -------------------------------------------------------------

// Checks, for every routing call, that routing_scores selects exactly the CPU reference's experts.
class SelectionCheck : public MoeRoutingHook {
 public:
  void on_router_input(Backend&, int64_t, const Tensor& x, const Tensor& router, const Tensor& bias,
                       const RoutingParams& p) override {
    x_ = x;
    router_ = router;
    bias_ = bias;
    p_ = p;
  }
  void on_route(Backend&, int64_t, Tensor& ids, Tensor&) override {
    const std::vector<float> logits = router_logits(x_, router_);
    const int64_t T = ids.dim(0), k = ids.dim(1), E = router_.dim(0), H = x_.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      const RoutingScores s = routing_scores(logits.data() + t * E, x_.f32() + t * H, router_, bias_, p_);
      const std::vector<int32_t> own(ids.data<int32_t>() + t * k, ids.data<int32_t>() + (t + 1) * k);
      mismatches += s.selected != own;
      ++decisions;
    }
  }
  int64_t decisions = 0, mismatches = 0;

 private:
  Tensor x_, router_, bias_;
  RoutingParams p_;
};

TEST(RoutingMarginTest, SelectionEqualsTheCpuReference) {
  for (const std::string name : {"tiny-deepseek-v3", "tiny-deepseek-v2"}) {
    CpuBackend backend;
    auto model = load_fixture_model(name, backend);
    SelectionCheck check;
    ASSERT_TRUE(model->set_moe_routing_hook(&check));
    int64_t tokens = 0;
    for (const auto& prompt : golden_prompts(fixture_model_dir(name) + "/golden.safetensors")) {
      SequenceRunner runner(*model, static_cast<int64_t>(prompt.size()) + 1);
      runner.append(prompt, /*all_logits=*/true);
      tokens += static_cast<int64_t>(prompt.size());
    }
    model->set_moe_routing_hook(nullptr);
    EXPECT_GE(check.decisions, tokens) << name;
    EXPECT_EQ(check.mismatches, 0) << name;
  }
}

// --- the rule on a real model ------------------------------------------------------------------------

// One (layer, token) decision of a golden prompt and an expert set to plant there instead of the
// reference's, with the rule's judgement of that swap.
struct Plant {
  int golden_case = -1;
  int64_t layer = -1, token = -1;
  std::vector<int32_t> ids;  // the planted row [k]
  RoutingFlip judged;
};

// Every single-expert swap of every decision the reference makes on `prompt`, judged.
class SwapScan : public MoeRoutingHook {
 public:
  explicit SwapScan(int golden_case) : case_(golden_case) {}
  void on_router_input(Backend&, int64_t, const Tensor& x, const Tensor& router, const Tensor& bias,
                       const RoutingParams& p) override {
    x_ = x;
    router_ = router;
    bias_ = bias;
    p_ = p;
  }
  void on_route(Backend&, int64_t layer, Tensor& ids, Tensor&) override {
    const std::vector<float> logits = router_logits(x_, router_);
    const int64_t T = ids.dim(0), k = ids.dim(1), E = router_.dim(0), H = x_.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      const RoutingScores s = routing_scores(logits.data() + t * E, x_.f32() + t * H, router_, bias_, p_);
      const int32_t* own = ids.data<int32_t>() + t * k;
      for (int64_t j = 0; j < k; ++j) {
        for (int32_t b = 0; b < E; ++b) {
          if (std::find(own, own + k, b) != own + k) continue;
          Plant plant{case_, layer, t, std::vector<int32_t>(own, own + k), {}};
          plant.ids[j] = b;
          plant.judged = judge_routing_flip(s, own, plant.ids.data(), k);
          plants.push_back(plant);
        }
      }
    }
  }
  std::vector<Plant> plants;

 private:
  int case_;
  Tensor x_, router_, bias_;
  RoutingParams p_;
};

// The plant as PlantedModel takes it.
PlantedRow planted(const Plant& p) {
  return {PlantedChoice::kRouting, p.layer, p.token, p.ids};
}

class RoutingRuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reference_ = load_fixture_model("tiny-deepseek-v3", backend_);
    inner_ = load_fixture_model("tiny-deepseek-v3", backend_);
    const std::string golden = fixture_model_dir("tiny-deepseek-v3") + "/golden.safetensors";
    const auto prompts = golden_prompts(golden);
    for (size_t c = 0; c < prompts.size(); ++c) {
      SwapScan scan(static_cast<int>(c));
      ASSERT_TRUE(reference_->set_moe_routing_hook(&scan));
      SequenceRunner runner(*reference_, static_cast<int64_t>(prompts[c].size()) + 1);
      runner.append(prompts[c], /*all_logits=*/true);
      reference_->set_moe_routing_hook(nullptr);
      plants_.insert(plants_.end(), scan.plants.begin(), scan.plants.end());
    }
    ASSERT_FALSE(plants_.empty());
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  // The swap nearest to a tie (smallest margin / bound) and the one farthest above its bound.
  const Plant& nearest() const {
    return *std::min_element(plants_.begin(), plants_.end(), [](const Plant& a, const Plant& b) {
      return a.judged.margin / a.judged.bound < b.judged.margin / b.judged.bound;
    });
  }
  const Plant& farthest() const {
    return *std::max_element(plants_.begin(), plants_.end(), [](const Plant& a, const Plant& b) {
      return a.judged.margin - a.judged.bound < b.judged.margin - b.judged.bound;
    });
  }
  // A one-case golden file: the fixture's case `c` (Hugging Face logits and greedy tokens).
  std::string golden_of_case(int c) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("dsinfer_routing_rule_" + std::to_string(getpid()) + "_" + std::to_string(c)))
                                 .string();
    write_one_case_golden(fixture_model_dir("tiny-deepseek-v3") + "/golden.safetensors", c, path);
    paths_.push_back(path);
    return path;
  }
  GoldenReport golden_with(Model& tested, const Plant& plant, bool rule_on) {
    GoldenOptions options;
    options.rel_l2_tolerance = 1e-5;  // the CPU reference's own error vs Hugging Face is ~1e-6
    options.margin_rule = true;
    options.routing_rule = rule_on;
    options.routing_reference = [this]() -> Model& { return *reference_; };
    return run_golden(tested, golden_of_case(plant.golden_case), options);
  }
  CpuBackend backend_;
  std::unique_ptr<Model> reference_, inner_;
  std::vector<Plant> plants_;
  std::vector<std::string> paths_;
};

TEST_F(RoutingRuleTest, PlantedFlipAtANearTieIsExcused) {
  const Plant& plant = nearest();
  ASSERT_TRUE(plant.judged.within) << "the fixture has no decision within bf16 noise of a tie";
  int64_t within = 0;
  for (const Plant& p : plants_) within += p.judged.within;
  std::printf(
      "nearest tie: case %d layer %lld token %lld (%s level) margin %.3e bound %.3e; %lld of %zu swaps "
      "within\n",
      plant.golden_case, static_cast<long long>(plant.layer), static_cast<long long>(plant.token),
      plant.judged.level.c_str(), plant.judged.margin, plant.judged.bound, static_cast<long long>(within),
      plants_.size());
  PlantedModel tested(*inner_, planted(plant));
  // Without the rule the planted flip fails the case.
  const GoldenReport off = golden_with(tested, plant, false);
  ASSERT_EQ(off.cases.size(), 1u);
  EXPECT_FALSE(off.cases[0].pass);
  EXPECT_FALSE(off.cases[0].routing_checked);
  // With it: exactly the planted flip, within noise, forced error zero (the same CPU arithmetic).
  const GoldenReport on = golden_with(tested, plant, true);
  const GoldenCase& c = on.cases[0];
  ASSERT_TRUE(c.routing_checked);
  ASSERT_EQ(c.routing.flips.size(), 1u);
  EXPECT_EQ(c.routing.flips[0].token, plant.token);
  EXPECT_EQ(c.routing.flips[0].layer, plant.layer);
  EXPECT_DOUBLE_EQ(c.routing.flips[0].margin, plant.judged.margin);
  EXPECT_TRUE(c.routing.flips[0].within);
  EXPECT_EQ(c.routing.forced_rel_l2, 0.0);
  EXPECT_TRUE(c.routing.forced_greedy_match);
  EXPECT_TRUE(c.excused_routing) << c.routing.reason;
  EXPECT_TRUE(c.pass);
  EXPECT_TRUE(on.pass);
  const nlohmann::json j = on.to_json();
  EXPECT_TRUE(j["routing_rule"].get<bool>());
  const nlohmann::json& cj = j["cases"][0];
  EXPECT_TRUE(cj["excused_routing"].get<bool>());
  EXPECT_EQ(cj["routing_flips"]["count"].get<int>(), 1);
  EXPECT_EQ(cj["routing_flips"]["flips"][0]["token"].get<int64_t>(), plant.token);
  EXPECT_TRUE(cj.contains("forced_rel_l2") && cj.contains("routing_reason") && cj.contains("rel_l2_err") &&
              cj.contains("excused_mismatch") && cj.contains("greedy_match"));
}

TEST_F(RoutingRuleTest, PlantedFlipWithALargeMarginIsNotExcused) {
  const Plant& plant = farthest();
  ASSERT_FALSE(plant.judged.within);
  ASSERT_GT(plant.judged.margin, 10 * plant.judged.bound);
  PlantedModel tested(*inner_, planted(plant));
  const GoldenReport r = golden_with(tested, plant, true);
  const GoldenCase& c = r.cases[0];
  ASSERT_TRUE(c.routing_checked);
  ASSERT_EQ(c.routing.flips.size(), 1u);
  EXPECT_FALSE(c.routing.flips[0].within);
  EXPECT_EQ(c.routing.forced_rel_l2, 0.0);  // the kernels agree: the routing alone is wrong
  EXPECT_FALSE(c.excused_routing);
  EXPECT_NE(c.routing.reason.find("not bf16 noise"), std::string::npos) << c.routing.reason;
  EXPECT_FALSE(c.pass);
  EXPECT_FALSE(r.pass);
}

TEST_F(RoutingRuleTest, ForcedErrorAboveTheToleranceIsNotExcused) {
  const Plant& plant = nearest();
  ASSERT_TRUE(plant.judged.within);
  PlantedModel tested(*inner_, planted(plant),
                      /*logit_scale=*/1.001f);  // rel L2 1e-3 > 1e-5 whatever the routing
  const GoldenReport r = golden_with(tested, plant, true);
  const GoldenCase& c = r.cases[0];
  ASSERT_TRUE(c.routing_checked);
  ASSERT_EQ(c.routing.flips.size(), 1u);
  EXPECT_TRUE(c.routing.flips[0].within);
  EXPECT_NEAR(c.routing.forced_rel_l2, 1e-3, 1e-4);
  EXPECT_FALSE(c.excused_routing);
  EXPECT_NE(c.routing.reason.find("rel_l2"), std::string::npos) << c.routing.reason;
  EXPECT_FALSE(c.pass);
}

TEST_F(RoutingRuleTest, NoFlipIsNotExcused) {
  Plant none = nearest();
  none.layer = -1;  // plants nothing
  PlantedModel tested(*inner_, planted(none), /*logit_scale=*/1.001f);
  const GoldenReport r = golden_with(tested, none, true);
  const GoldenCase& c = r.cases[0];
  ASSERT_TRUE(c.routing_checked);
  EXPECT_TRUE(c.routing.flips.empty());
  EXPECT_FALSE(c.excused_routing);
  EXPECT_FALSE(c.pass);
}

TEST(RoutingRuleDenseTest, DenseModelNeverGoesThroughIt) {
  CpuBackend backend;
  auto model = load_fixture_model("tiny-llama", backend);
  EXPECT_FALSE(has_moe_routing(*model));
  GoldenOptions options;
  options.rel_l2_tolerance = 1e-12;  // every case fails
  options.routing_rule = true;
  bool asked = false;
  options.routing_reference = [&]() -> Model& {
    asked = true;
    return *model;
  };
  const GoldenReport r = run_golden(*model, fixture_model_dir("tiny-llama") + "/golden.safetensors", options);
  EXPECT_FALSE(asked);
  EXPECT_FALSE(r.routing_rule);
  EXPECT_FALSE(r.pass);
  for (const GoldenCase& c : r.cases) {
    EXPECT_FALSE(c.routing_checked);
    EXPECT_FALSE(c.excused_routing);
    EXPECT_FALSE(c.pass);
  }
  const nlohmann::json j = r.to_json();
  EXPECT_FALSE(j["cases"][0].contains("routing_flips"));
}

}  // namespace
}  // namespace dsinfer
