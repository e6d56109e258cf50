// The routing rule's index-selection half (engine/selection_margin, engine/routing_rule): the score and
// noise-reach arithmetic on a hand-made cache; the recomputed scores rank the CPU reference's selections as
// it does; on tiny-deepseek-v32 and tiny-deepseek-v4 a planted selection swap at the reference's nearest tie
// is excused, a swap with a large margin is not, a forced error above the tolerance is not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../fixture_models.h"
#include "../golden_files.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/golden_eval.h"
#include "engine/routing_margin.h"
#include "engine/routing_rule.h"
#include "engine/selection_margin.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "planted_model.h"

namespace dsinfer {
namespace {

Tensor from(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// --- the arithmetic ----------------------------------------------------------------------------------

// One query token at position 3 of one sequence over four 2-wide keys in block 0 of a host cache.
class SelectionMarginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvLayerSpec spec;
    spec.width = 2;
    cache_ = std::make_unique<KvCache>(std::vector<KvLayerSpec>{spec}, 1, 8);
    const float keys[4][2] = {{1, 0}, {0, 1}, {1, 1}, {-1, 0}};  // [4, 2]
    for (int j = 0; j < 4; ++j) std::memcpy(cache_->slot(0, j), keys[j], sizeof keys[j]);
    plan_.token_ids = {5};
    plan_.positions = {3};
    plan_.cu_seqlens = {0, 1};
    plan_.context_lens = {4};
    plan_.block_table_indptr = {0, 1};
    plan_.block_table = {0};
    plan_.slot_mapping = {3};
    plan_.block_size = 8;
    in_.q = from({2, 0, 0, -1}, {1, 2, 2});  // head 0 (2, 0), head 1 (0, -1)
    in_.weights = from({1.0f, 0.5f}, {1, 2});
    in_.cache = cache_.get();
    in_.entry = 0;
    in_.plan = &plan_;
    in_.scale = 0.25f;
    in_.weight_scale = 0.5f;
  }
  std::unique_ptr<KvCache> cache_;
  BatchPlan plan_;
  IndexScoreInputs in_;
};

TEST_F(SelectionMarginTest, ScoresAndReach) {
  const double u = kBf16UnitRoundoff, e = (1 + u) * 0.25 * (2 * u + u * u);  // noise of relu(scale q . k)
  double reach = 0;
  // a = (0.5, 0.25); row 0: head 0 relu(0.25 * 2) = 0.5, head 1 relu(0) = 0
  EXPECT_DOUBLE_EQ(index_score(in_, 0, 0, &reach), 0.25);
  EXPECT_NEAR(reach, 0.5 * (e * 2 * 1 + u * 0.5) + 0.25 * (e * 1 * 1), 1e-15);
  EXPECT_DOUBLE_EQ(index_score(in_, 0, 1, &reach), 0.0);  // head 1's dot is -1: relu 0
  EXPECT_NEAR(reach, 0.5 * e * 2 + 0.25 * e, 1e-15);
  EXPECT_DOUBLE_EQ(index_score(in_, 0, 2, &reach), 0.25);
  EXPECT_NEAR(reach, 0.5 * (e * 2 * std::sqrt(2.0) + u * 0.5) + 0.25 * e * std::sqrt(2.0), 1e-15);
  EXPECT_DOUBLE_EQ(index_score(in_, 0, 3, nullptr), 0.0);
  EXPECT_THROW(index_score(in_, 0, 4, nullptr), Error);  // not visible at position 3
  in_.ratio = 2;                                         // V4: rows j < (3 + 1) / 2
  EXPECT_NO_THROW(index_score(in_, 0, 1, nullptr));
  EXPECT_THROW(index_score(in_, 0, 2, nullptr), Error);
}

TEST_F(SelectionMarginTest, JudgesPairsTiesAndInvalidRows) {
  // The reference keeps {0, 2} (0.25 each); the tested {0, 1}: row 2 dropped for row 1, margin 0.25.
  SelectionFlip far = judge_selection_flip(in_, 0, {0, 2}, {0, 1});
  EXPECT_EQ(far.level, "rows");
  EXPECT_EQ(far.out, std::vector<int32_t>{2});
  EXPECT_EQ(far.in, std::vector<int32_t>{1});
  EXPECT_DOUBLE_EQ(far.margin, 0.25);
  double r1 = 0, r2 = 0;
  index_score(in_, 0, 1, &r1);
  index_score(in_, 0, 2, &r2);
  EXPECT_DOUBLE_EQ(far.bound, r1 + r2);
  EXPECT_FALSE(far.within);
  // An exact tie at 0 (rows 1 and 3) is within noise whatever the reach.
  SelectionFlip tie = judge_selection_flip(in_, 0, {0, 1, 2}, {0, 2, 3});
  EXPECT_TRUE(tie.within);
  EXPECT_DOUBLE_EQ(tie.margin, 0.0);
  // Two pairs: the one exceeding its bound most is shown, and it decides.
  SelectionFlip two = judge_selection_flip(in_, 0, {0, 1, 2}, {0, 1, 3});  // 2 -> 3: margin 0.25
  EXPECT_FALSE(two.within);
  EXPECT_DOUBLE_EQ(two.margin, 0.25);
  // Invalid: a row not visible, a repeated row, a different count.
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{0, 4}, std::vector<int32_t>{0, 0}, std::vector<int32_t>{0, 1, 3}}) {
    SelectionFlip f = judge_selection_flip(in_, 0, {0, 2}, bad);
    EXPECT_EQ(f.level, "invalid");
    EXPECT_FALSE(f.within);
    EXPECT_TRUE(std::isinf(f.margin));
  }
}

// --- on the fixture models -------------------------------------------------------------------------

// A planted change of one selection row: model layer, token of the prompt pass, the row's new kept rows.
struct Plant {
  int golden_case = 0;
  int64_t layer = -1;
  int64_t token = -1;
  std::vector<int32_t> row;  // [K] the tested row (-1 padded)
  SelectionFlip judged;
};

// Scans the first forward pass: checks each row's kept set against the recomputed scores and proposes, per
// row that leaves rows out, the swap nearest to a tie (weakest kept for strongest left out) and the swap
// farthest from one (strongest kept for weakest left out).
class SwapScan : public IndexSelectionHook {
 public:
  explicit SwapScan(int golden_case) : case_(golden_case) {}
  void on_index_inputs(Backend&, int64_t layer, const IndexScoreInputs& inputs) override { in_ = inputs; }
  void on_select(Backend&, int64_t layer, Tensor& selected) override {
    const int64_t T = selected.dim(0), K = selected.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* row = selected.data<int32_t>() + t * K;
      std::vector<int32_t> kept;
      for (int64_t e = 0; e < K; ++e)
        if (row[e] >= 0) kept.push_back(row[e]);
      std::sort(kept.begin(), kept.end());
      const int64_t visible = (in_.plan->positions[t] + 1) / in_.ratio;
      if (visible <= static_cast<int64_t>(kept.size())) continue;
      std::vector<double> score(visible);
      for (int64_t j = 0; j < visible; ++j) score[j] = index_score(in_, t, j, nullptr);
      auto is_kept = [&](int64_t j) { return std::binary_search(kept.begin(), kept.end(), j); };
      int32_t weakest = -1, strongest = -1, best_out = -1, worst_out = -1;
      for (int32_t j = 0; j < visible; ++j) {
        if (is_kept(j)) {
          if (weakest < 0 || score[j] < score[weakest]) weakest = j;
          if (strongest < 0 || score[j] > score[strongest]) strongest = j;
        } else {
          if (best_out < 0 || score[j] > score[best_out]) best_out = j;
          if (worst_out < 0 || score[j] < score[worst_out]) worst_out = j;
        }
      }
      // The reference's choice is the top of its own scores (float accumulation vs double here).
      min_gap = std::min(min_gap, score[weakest] - score[best_out]);
      for (auto [a, b] : {std::pair{weakest, best_out}, std::pair{strongest, worst_out}}) {
        Plant p{case_, layer, t, std::vector<int32_t>(row, row + K), {}};
        std::replace(p.row.begin(), p.row.end(), a, b);
        std::vector<int32_t> tested = kept;
        std::replace(tested.begin(), tested.end(), a, b);
        std::sort(tested.begin(), tested.end());
        p.judged = judge_selection_flip(in_, t, kept, tested);
        plants.push_back(p);
      }
    }
  }
  std::vector<Plant> plants;
  double min_gap = std::numeric_limits<double>::infinity();

 private:
  int case_;
  IndexScoreInputs in_;
};

// The plant as PlantedModel takes it.
PlantedRow planted(const Plant& p) {
  return {PlantedChoice::kSelection, p.layer, p.token, p.row};
}

class SelectionRuleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    reference_ = load_fixture_model(GetParam(), backend_);
    inner_ = load_fixture_model(GetParam(), backend_);
    const auto prompts = golden_prompts(golden_path());
    for (size_t c = 0; c < prompts.size(); ++c) {
      SwapScan scan(static_cast<int>(c));
      ASSERT_TRUE(reference_->set_index_selection_hook(&scan));
      SequenceRunner runner(*reference_, static_cast<int64_t>(prompts[c].size()) + 1);
      runner.append(prompts[c], /*all_logits=*/true);
      reference_->set_index_selection_hook(nullptr);
      EXPECT_GE(scan.min_gap, -1e-6) << "case " << c << ": a kept row scores below a row left out";
      plants_.insert(plants_.end(), scan.plants.begin(), scan.plants.end());
    }
    ASSERT_FALSE(plants_.empty()) << "no prompt is long enough for the indexer to leave rows out";
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  std::string golden_path() const { return fixture_model_dir(GetParam()) + "/golden.safetensors"; }
  const Plant& nearest() const {
    return *std::min_element(plants_.begin(), plants_.end(), [](const Plant& a, const Plant& b) {
      return a.judged.margin - a.judged.bound < b.judged.margin - b.judged.bound;
    });
  }
  const Plant& farthest() const {
    return *std::max_element(plants_.begin(), plants_.end(), [](const Plant& a, const Plant& b) {
      return a.judged.margin - a.judged.bound < b.judged.margin - b.judged.bound;
    });
  }
  GoldenReport golden_with(Model& tested, const Plant& plant, bool rule_on) {
    const std::string path =
        (std::filesystem::temp_directory_path() /
         ("dsinfer_selection_rule_" + std::to_string(getpid()) + "_" + std::to_string(paths_.size())))
            .string();
    write_one_case_golden(golden_path(), plant.golden_case, path);
    paths_.push_back(path);
    GoldenOptions options;
    options.rel_l2_tolerance = 1e-5;  // the CPU reference's own error vs Hugging Face is ~1e-6
    options.margin_rule = true;
    options.routing_rule = rule_on;
    options.routing_reference = [this]() -> Model& { return *reference_; };
    return run_golden(tested, path, options);
  }
  CpuBackend backend_;
  std::unique_ptr<Model> reference_, inner_;
  std::vector<Plant> plants_;
  std::vector<std::string> paths_;
};

INSTANTIATE_TEST_SUITE_P(Models, SelectionRuleTest,
                         ::testing::Values("tiny-deepseek-v32", "tiny-deepseek-v4"),
                         [](const auto& info) { return info.param == "tiny-deepseek-v32" ? "v32" : "v4"; });

TEST_P(SelectionRuleTest, PlantedSwapAtANearTieIsExcused) {
  const Plant& plant = nearest();
  ASSERT_TRUE(plant.judged.within) << "no swap within bf16 noise of a tie";
  std::printf("nearest: case %d layer %lld token %lld margin %.3e bound %.3e (%zu swaps scanned)\n",
              plant.golden_case, static_cast<long long>(plant.layer), static_cast<long long>(plant.token),
              plant.judged.margin, plant.judged.bound, plants_.size());
  PlantedModel tested(*inner_, planted(plant));
  EXPECT_TRUE(has_index_selection(tested));
  // Without the rule the planted swap fails the case (the attention read other rows).
  const GoldenReport off = golden_with(tested, plant, false);
  ASSERT_EQ(off.cases.size(), 1u);
  EXPECT_FALSE(off.cases[0].pass);
  EXPECT_FALSE(off.cases[0].routing_checked);
  // With it: exactly the planted row differs, within noise, forced error zero (the same CPU arithmetic).
  const GoldenReport on = golden_with(tested, plant, true);
  const GoldenCase& c = on.cases[0];
  ASSERT_TRUE(c.routing_checked);
  EXPECT_TRUE(c.routing.flips.empty());
  EXPECT_GT(c.routing.selection_rows, 0);
  ASSERT_EQ(c.routing.selection_flips.size(), 1u);
  const SelectionFlip& f = c.routing.selection_flips[0];
  EXPECT_EQ(f.token, plant.token);
  EXPECT_EQ(f.layer, plant.layer);
  EXPECT_EQ(f.out, plant.judged.out);
  EXPECT_EQ(f.in, plant.judged.in);
  EXPECT_DOUBLE_EQ(f.margin, plant.judged.margin);
  EXPECT_TRUE(f.within);
  EXPECT_EQ(c.routing.forced_rel_l2, 0.0);
  EXPECT_TRUE(c.routing.forced_greedy_match);
  EXPECT_TRUE(c.excused_routing) << c.routing.reason;
  EXPECT_NE(c.routing.reason.find("index selections differ"), std::string::npos) << c.routing.reason;
  EXPECT_TRUE(c.pass);
  EXPECT_TRUE(on.pass);
  const nlohmann::json cj = on.to_json()["cases"][0];
  EXPECT_EQ(cj["selection_flips"]["count"].get<int>(), 1);
  EXPECT_EQ(cj["selection_flips"]["flips"][0]["token"].get<int64_t>(), plant.token);
  EXPECT_TRUE(cj["excused_routing"].get<bool>());
}

TEST_P(SelectionRuleTest, PlantedSwapWithALargeMarginIsNotExcused) {
  const Plant& plant = farthest();
  ASSERT_FALSE(plant.judged.within);
  ASSERT_GT(plant.judged.margin, 10 * plant.judged.bound);
  PlantedModel tested(*inner_, planted(plant));
  const GoldenReport r = golden_with(tested, plant, true);
  const GoldenCase& c = r.cases[0];
  ASSERT_TRUE(c.routing_checked);
  ASSERT_EQ(c.routing.selection_flips.size(), 1u);
  EXPECT_FALSE(c.routing.selection_flips[0].within);
  EXPECT_EQ(c.routing.forced_rel_l2, 0.0);  // the kernels agree: the selection alone is wrong
  EXPECT_FALSE(c.excused_routing);
  EXPECT_NE(c.routing.reason.find("not bf16 noise"), std::string::npos) << c.routing.reason;
  EXPECT_FALSE(c.pass);
}

TEST_P(SelectionRuleTest, ForcedErrorAboveTheToleranceIsNotExcused) {
  const Plant& plant = nearest();
  ASSERT_TRUE(plant.judged.within);
  PlantedModel tested(*inner_, planted(plant), /*logit_scale=*/1.001f);
  const GoldenReport r = golden_with(tested, plant, true);
  const GoldenCase& c = r.cases[0];
  ASSERT_TRUE(c.routing_checked);
  ASSERT_EQ(c.routing.selection_flips.size(), 1u);
  EXPECT_NEAR(c.routing.forced_rel_l2, 1e-3, 1e-4);
  EXPECT_FALSE(c.excused_routing);
  EXPECT_NE(c.routing.reason.find("rel_l2"), std::string::npos) << c.routing.reason;
  EXPECT_FALSE(c.pass);
}

}  // namespace
}  // namespace dsinfer
