// The margin rule (engine/margin_rule.h) on synthetic logits, `eval golden` under it on a golden file with a
// planted near-tie, and batched-vs-one-at-a-time agreement on the CPU fixture models (identical there).
#include "engine/margin_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../golden_files.h"
#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "engine/batch_agreement.h"
#include "engine/golden_eval.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace dsinfer {
namespace {

const std::string kTinyLlama = std::string(DSINFER_TEST_DATA) + "/models/tiny-llama";

TEST(MarginRule, BoundIsTwiceTheLargerOfMeasuredErrorAndBf16Epsilon) {
  EXPECT_DOUBLE_EQ(margin_bound(0.0, 12.8), 2.0 * 12.8 / 128.0);
  EXPECT_DOUBLE_EQ(margin_bound(0.5, 12.8), 1.0);   // measured error dominates
  EXPECT_DOUBLE_EQ(margin_bound(1e-3, 12.8), 0.2);  // bf16 epsilon dominates
  EXPECT_DOUBLE_EQ(margin_bound(0.0, 0.0), 0.0);
}

TEST(MarginRule, ReferenceTop2MarginWhenTheReferenceLogitsAreKnown) {
  // Reference: token 2 at 10.0, token 1 at 9.95 (margin 0.05); ours prefers token 1.
  std::vector<float> ref = {0.0f, 9.95f, 10.0f, -3.0f};
  std::vector<float> ours = {0.0f, 10.01f, 9.99f, -3.0f};
  GreedyMismatch m = judge_mismatch(0, ours.data(), ref.data(), 4, 1, 2, 0.0, true);
  EXPECT_EQ(m.margin_source, "reference_top2");
  EXPECT_NEAR(m.margin, 0.05, 1e-6);
  EXPECT_NEAR(m.bound, 2 * 10.0 / 128, 1e-9);  // 0.15625
  EXPECT_TRUE(m.excused);
  EXPECT_EQ(m.ours, 1);
  EXPECT_EQ(m.reference, 2);
  // The same flip with a reference margin of 0.5 is a real error.
  ref[1] = 9.5f;
  m = judge_mismatch(0, ours.data(), ref.data(), 4, 1, 2, 0.0, true);
  EXPECT_NEAR(m.margin, 0.5, 1e-6);
  EXPECT_FALSE(m.excused);
  // A large measured logits error widens the bound to 2x that error.
  m = judge_mismatch(0, ours.data(), ref.data(), 4, 1, 2, 0.3, true);
  EXPECT_NEAR(m.bound, 0.6, 1e-12);
  EXPECT_TRUE(m.excused);
}

TEST(MarginRule, OurGapWhenTheReferenceLogitsAreUnknown) {
  std::vector<float> ours = {1.0f, 4.0f, 3.9f, 64.0f - 60.0f};  // max |logit| 4
  GreedyMismatch m = judge_mismatch(5, ours.data(), nullptr, 4, 1, 2, 0.0, true);
  EXPECT_EQ(m.step, 5);
  EXPECT_EQ(m.margin_source, "our_gap");
  EXPECT_NEAR(m.margin, 0.1, 1e-6);
  EXPECT_NEAR(m.bound, 2 * 4.0 / 128, 1e-9);  // 0.0625 < 0.1
  EXPECT_FALSE(m.excused);
  ours[2] = 3.96f;  // gap 0.04
  EXPECT_TRUE(judge_mismatch(5, ours.data(), nullptr, 4, 1, 2, 0.0, true).excused);
}

TEST(MarginRule, OffNeverExcusesButStillReports) {
  std::vector<float> ref = {0.0f, 10.0f, 10.0f};
  GreedyMismatch m = judge_mismatch(0, ref.data(), ref.data(), 3, 2, 1, 0.0, false);
  EXPECT_DOUBLE_EQ(m.margin, 0.0);
  EXPECT_GT(m.bound, 0.0);
  EXPECT_FALSE(m.excused);
  EXPECT_THROW(judge_mismatch(0, ref.data(), ref.data(), 3, 3, 1, 0.0, true), Error);
}

TEST(MarginRule, ArgmaxTakesTheLowestIdOnTiesAndTop2Margin) {
  std::vector<float> v = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax_first(v.data(), 4), 1);
  EXPECT_DOUBLE_EQ(top2_margin(v.data(), 4), 0.0);
  v[2] = 2.5f;
  EXPECT_DOUBLE_EQ(top2_margin(v.data(), 4), 0.5);
  EXPECT_DOUBLE_EQ(max_abs(std::vector<float>{-7.0f, 3.0f}.data(), 2), 7.0);
}

// Copies of a golden file's tensors (owning, so they can be edited).
std::map<std::string, Tensor> read_all(const SafetensorsFile& f) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, info] : f.tensors()) {
    Tensor src = f.get(name);
    Tensor t = Tensor::empty(src.dtype(), src.shape());
    std::memcpy(t.raw(), src.raw(), src.nbytes());
    out.emplace(name, t);
  }
  return out;
}

class GoldenMarginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LoadOptions options;
    options.progress = false;
    model_ = load_model(kTinyLlama, backend_, options);
  }
  std::string planted(const std::string& name, const std::map<std::string, Tensor>& tensors) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("dsinfer_margin_" + std::to_string(getpid()) + name))
            .string();
    write_safetensors(path, tensors, {{"cases", "1"}});
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  CpuBackend backend_;
  std::unique_ptr<Model> model_;
  std::vector<std::string> paths_;
};

TEST_F(GoldenMarginTest, NearTieAtTheFirstStepIsExcusedOnlyWithTheRuleOn) {
  SafetensorsFile golden(kTinyLlama + "/golden.safetensors");
  std::map<std::string, Tensor> t;
  for (auto& [name, tensor] : read_all(golden))
    if (name.size() > 2 && name.substr(name.size() - 2) == ".0") t.emplace(name, tensor);
  Tensor& logits = t.at("logits.0");  // [kept, V]
  const int64_t V = logits.dim(1);
  float* last = logits.f32() + (logits.dim(0) - 1) * V;
  const int32_t top = argmax_first(last, V);
  int32_t second = top == 0 ? 1 : 0;
  for (int32_t v = 0; v < V; ++v)
    if (v != top && last[v] > last[second]) second = v;
  // The reference now prefers `second` by 1e-4 and its greedy continuation starts with it.
  last[second] = last[top] + 1e-4f;
  t.at("greedy.0").data<int32_t>()[0] = second;
  const std::string path = planted("near_tie", t);

  GoldenOptions options;
  options.rel_l2_tolerance = 1.0;  // the planted logit moves the error; this test is about the greedy rule
  options.margin_rule = true;
  GoldenReport on = run_golden(*model_, path, options);
  ASSERT_EQ(on.cases.size(), 1u);
  const GoldenCase& c = on.cases[0];
  EXPECT_FALSE(c.greedy_match);
  EXPECT_TRUE(c.excused_mismatch);
  EXPECT_EQ(c.mismatch.step, 0);
  EXPECT_EQ(c.mismatch.ours, top);
  EXPECT_EQ(c.mismatch.reference, second);
  EXPECT_EQ(c.mismatch.margin_source, "reference_top2");
  EXPECT_NEAR(c.mismatch.margin, 1e-4, 2e-5);
  EXPECT_EQ(c.greedy.size(), 1u) << "nothing after an excused mismatch is compared";
  EXPECT_TRUE(on.pass);
  EXPECT_TRUE(on.to_json()["cases"][0]["excused_mismatch"].is_object());

  options.margin_rule = false;
  GoldenReport off = run_golden(*model_, path, options);
  EXPECT_FALSE(off.cases[0].excused_mismatch);
  EXPECT_FALSE(off.pass);
  EXPECT_TRUE(off.to_json()["cases"][0]["excused_mismatch"].is_null());
}

TEST_F(GoldenMarginTest, LaterMismatchIsJudgedByOurGap) {
  SafetensorsFile golden(kTinyLlama + "/golden.safetensors");
  std::map<std::string, Tensor> t;
  for (auto& [name, tensor] : read_all(golden))
    if (name.size() > 2 && name.substr(name.size() - 2) == ".0") t.emplace(name, tensor);
  int32_t* greedy = t.at("greedy.0").data<int32_t>();
  ASSERT_GT(t.at("greedy.0").numel(), 3);
  const int32_t real = greedy[3];
  greedy[3] = (real + 1) % static_cast<int32_t>(t.at("logits.0").dim(1));
  GoldenOptions options;
  options.margin_rule = true;
  GoldenReport r = run_golden(*model_, planted("later", t), options);
  const GoldenCase& c = r.cases[0];
  EXPECT_EQ(c.first_mismatch, 3);
  EXPECT_EQ(c.mismatch.step, 3);
  EXPECT_EQ(c.mismatch.ours, real);
  EXPECT_EQ(c.mismatch.margin_source, "our_gap");
  EXPECT_GE(c.mismatch.margin, 0.0);  // we chose ours: its logit is the largest
  EXPECT_EQ(c.excused_mismatch, c.mismatch.margin <= c.mismatch.bound);
  EXPECT_EQ(r.pass, c.excused_mismatch);
}

TEST(BatchAgreement, CpuRunsAgreeExactlyOnTheFixtureModels) {
  for (const char* name : {"tiny-llama", "tiny-qwen2"}) {
    BatchAgreementOptions o;
    o.engine.model_dir = std::string(DSINFER_TEST_DATA) + "/models/" + name;
    o.engine.device = "cpu";
    o.engine.context_chunk_size = 16;  // prompts are prefilled in chunks next to other sequences' decodes
    o.engine.max_num_tokens = 64;
    o.prompts = 6;
    o.max_tokens = 8;
    o.prompt_len = 40;
    BatchAgreementReport r = run_batch_agreement(o);
    ASSERT_EQ(r.cases.size(), 6u) << name;
    EXPECT_EQ(r.backend, "cpu");
    EXPECT_EQ(r.cases[0].source, "golden") << name;
    EXPECT_EQ(r.cases.back().source, "synthetic") << name;
    EXPECT_EQ(r.exact, 6) << name;
    EXPECT_DOUBLE_EQ(r.agreement_rate(), 1.0) << name;
    for (const BatchAgreementCase& c : r.cases) EXPECT_EQ(c.single.size(), 8u);
    EXPECT_EQ(r.to_json()["exact_rate"], 1.0);
  }
}

TEST(BatchAgreement, SyntheticPromptsAreSeededAndInRange) {
  auto a = synthetic_prompts(5, 20, 300, 7), b = synthetic_prompts(5, 20, 300, 7);
  EXPECT_EQ(a, b);
  for (const auto& p : a) {
    EXPECT_GE(p.size(), 10u);
    EXPECT_LE(p.size(), 20u);
    for (int32_t id : p) EXPECT_TRUE(id >= 0 && id < 300);
  }
  EXPECT_NE(a, synthetic_prompts(5, 20, 300, 8));
}

}  // namespace
}  // namespace dsinfer
