// The teacher-forced routing check (engine/routing_check): two runs of the same CPU model agree exactly;
// a tested model whose routing is perturbed in one decision shows that one flip, a non-zero free error and
// exactly zero error once the reference is forced to the same routing; ids handed back as F32 (the CUDA
// backend's to_host) are read as ids; DeepSeek-V3.2's index selections are compared too; a dense model is
// refused.
#include "engine/routing_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../engine/planted_model.h"
#include "../fixture_models.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/selection_hooks.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {
namespace {

// Hands routing to `next` after swapping, in the first call's layer `layer`, token 0's first expert for one
// it did not choose: a stand-in for a backend whose routing flips one decision.
class FlipOneDecision : public MoeRoutingHook {
 public:
  FlipOneDecision(int64_t layer, int64_t experts) : layer_(layer), experts_(experts) {}
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override {
    if (layer == layer_ && !done_) {
      done_ = true;
      ids = ids.clone();
      int32_t* row = ids.data<int32_t>();
      const int64_t k = ids.dim(1);
      for (int32_t e = 0; e < experts_; ++e) {
        bool used = false;
        for (int64_t j = 0; j < k; ++j) used = used || row[j] == e;
        if (!used) {
          row[0] = e;
          break;
        }
      }
    }
    if (next) next->on_route(backend, layer, ids, weights);
  }
  MoeRoutingHook* next = nullptr;

 private:
  int64_t layer_, experts_;
  bool done_ = false;
};

// A model that routes through FlipOneDecision before any hook the check installs.
class FlippedModel : public Model {
 public:
  FlippedModel(Model& inner, int64_t layer, int64_t experts)
      : inner_(inner), layer_(layer), flip_(layer, experts) {
    inner_.set_moe_routing_hook(&flip_);
  }
  ~FlippedModel() override { inner_.set_moe_routing_hook(nullptr); }
  const ModelConfig& config() const override { return inner_.config(); }
  std::vector<KvLayerSpec> kv_layout() const override { return inner_.kv_layout(); }
  Tensor forward(const BatchPlan& plan, KvCache& cache) override { return inner_.forward(plan, cache); }
  // Each run of the check installs its hook (and removes it after): every run flips the decision anew.
  bool set_moe_routing_hook(MoeRoutingHook* hook) override {
    flip_ = FlipOneDecision(layer_, inner_.config().n_routed_experts);
    flip_.next = hook;
    return true;
  }

 private:
  Model& inner_;
  int64_t layer_;
  FlipOneDecision flip_;
};

TEST(RoutingCheckTest, SameModelTwiceAgreesExactly) {
  CpuBackend backend;
  auto tested = load_fixture_model("tiny-deepseek-v3", backend);
  auto reference = load_fixture_model("tiny-deepseek-v3", backend);
  const auto prompts = golden_prompts(fixture_model_dir("tiny-deepseek-v3") + "/golden.safetensors");
  const auto cases = run_routing_check(*tested, *reference, prompts, 5);
  ASSERT_EQ(cases.size(), prompts.size());
  for (const RoutingCheckCase& c : cases) {
    // Every token passes every MoE layer once (layers 1 and 2; layer 0 is dense).
    EXPECT_EQ(c.decisions, 2 * c.tokens) << "case " << c.index;
    EXPECT_EQ(c.flipped, 0);
    EXPECT_EQ(c.free_rel_l2, 0.0);
    EXPECT_EQ(c.forced_rel_l2, 0.0);
  }
}

TEST(RoutingCheckTest, OneFlippedDecisionIsCountedAndForcedAway) {
  CpuBackend backend;
  auto inner = load_fixture_model("tiny-deepseek-v3", backend);
  auto reference = load_fixture_model("tiny-deepseek-v3", backend);
  FlippedModel tested(*inner, /*layer=*/1, inner->config().n_routed_experts);
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 33, 50, 70, 91}};
  const auto cases = run_routing_check(tested, *reference, prompts);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].decisions, 12);
  EXPECT_EQ(cases[0].flipped, 1);
  // The flip is judged against the reference's scores (engine/routing_margin.h) at its token and layer.
  ASSERT_EQ(cases[0].flips.size(), 1u);
  EXPECT_EQ(cases[0].flips[0].token, 0);
  EXPECT_EQ(cases[0].flips[0].layer, 1);
  EXPECT_EQ(cases[0].flips[0].out.size(), 1u);
  EXPECT_TRUE(cases[0].flips[0].level == "expert" || cases[0].flips[0].level == "group");
  EXPECT_TRUE(std::isfinite(cases[0].flips[0].margin) && cases[0].flips[0].bound > 0.0);
  EXPECT_GT(cases[0].free_rel_l2, 0.0);
  EXPECT_EQ(cases[0].forced_rel_l2, 0.0);
}

// Hands every tensor back as F32, as the CUDA backend's to_host does (its I32 expert ids included).
class F32HostBackend : public CpuBackend {
 public:
  Tensor to_host(const Tensor& t) override { return t.dtype() == DType::F32 ? t : t.to_f32(); }
};

TEST(RoutingCheckTest, IdsHandedBackAsF32AreReadAsIds) {
  F32HostBackend tested_backend;
  CpuBackend reference_backend;
  auto tested = load_fixture_model("tiny-deepseek-v3", tested_backend);
  auto reference = load_fixture_model("tiny-deepseek-v3", reference_backend);
  const auto cases = run_routing_check(*tested, *reference, {{1, 17, 33, 50, 70, 91}});
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].decisions, 12);
  EXPECT_EQ(cases[0].flipped, 0);
  EXPECT_EQ(cases[0].forced_rel_l2, 0.0);
}

// DeepSeek-V3.2: the indexer's selections are replayed and compared beside the routing. The same model twice
// agrees exactly; one planted row of kept keys is counted once, judged, and forced away.
TEST(RoutingCheckTest, SparseAttentionSelectionsAreComparedToo) {
  CpuBackend backend;
  auto inner = load_fixture_model("tiny-deepseek-v32", backend);
  auto reference = load_fixture_model("tiny-deepseek-v32", backend);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + 7 * i % 300);
  const auto same = run_routing_check(*inner, *reference, {prompt});
  ASSERT_EQ(same.size(), 1u);
  const int64_t indexed_layers = inner->config().num_layers;  // every layer of V3.2 is indexed
  EXPECT_EQ(same[0].selections, indexed_layers * 40);
  EXPECT_EQ(same[0].selections_differ, 0);
  EXPECT_EQ(same[0].forced_rel_l2, 0.0);
  EXPECT_EQ(same[0].free_rel_l2, 0.0);
  // The last layer's selection of the last token, one kept row swapped for one left out.
  SelectionRecorder recorded;
  {
    ScopedSelectionHook hook(*reference, &recorded, "test");
    SequenceRunner runner(*reference, 41);
    runner.append(prompt, /*all_logits=*/true);
  }
  const Tensor& last = recorded.calls.back();  // [40, K]
  const int64_t K = last.dim(1);
  PlantedRow plant{PlantedChoice::kSelection, recorded.layers.back(), 39,
                   std::vector<int32_t>(last.data<int32_t>() + 39 * K, last.data<int32_t>() + 40 * K)};
  int32_t left_out = 0;
  while (std::find(plant.row.begin(), plant.row.end(), left_out) != plant.row.end()) ++left_out;
  ASSERT_LT(left_out, 40);
  plant.row[0] = left_out;
  PlantedModel tested(*inner, plant);
  const auto cases = run_routing_check(tested, *reference, {prompt});
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].selections_differ, 1);
  ASSERT_EQ(cases[0].selection_flips.size(), 1u);
  EXPECT_EQ(cases[0].selection_flips[0].token, 39);
  EXPECT_EQ(cases[0].selection_flips[0].in, std::vector<int32_t>{left_out});
  EXPECT_EQ(cases[0].selection_flips[0].level, "rows");
  EXPECT_GT(cases[0].free_rel_l2, 0.0);
  EXPECT_EQ(cases[0].forced_rel_l2, 0.0);
  const nlohmann::json j = routing_check_json(cases);
  EXPECT_EQ(j[0]["selections_differ"].get<int64_t>(), 1);
  EXPECT_EQ(j[0]["selection_flips"].size(), 1u);
}

TEST(RoutingCheckTest, DenseModelIsRefused) {
  CpuBackend backend;
  auto tested = load_fixture_model("tiny-llama", backend);
  auto reference = load_fixture_model("tiny-llama", backend);
  EXPECT_THROW(run_routing_check(*tested, *reference, {{1, 2, 3}}), Error);
}

}  // namespace
}  // namespace dsinfer
