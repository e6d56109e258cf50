// Whole-model checks against Hugging Face transformers goldens (fp32 CPU reference): every fixture model,
// whole-prompt and chunked prefill, and batched vs one-at-a-time forward passes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "engine/golden_eval.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace dsinfer {
namespace {

std::string model_dir(const std::string& name) {
  if (name == "deepseek-v3-tiny-code") return std::string(DSINFER_SOURCE_DIR) + "/models/" + name;
  return std::string(DSINFER_TEST_DATA) + "/models/" + name;
}

struct GoldenParam {
  std::string model;
  int64_t chunk;
};

class GoldenTest : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(GoldenTest, MatchesTransformers) {
  const GoldenParam& p = GetParam();
  CpuBackend backend;
  LoadOptions options;
  options.progress = false;
  auto model = load_model(model_dir(p.model), backend, options);
  GoldenOptions golden;
  golden.prefill_chunk = p.chunk;
  GoldenReport report = run_golden(*model, model_dir(p.model) + "/golden.safetensors", golden);
  ASSERT_FALSE(report.cases.empty());
  for (const GoldenCase& c : report.cases) {
    EXPECT_LE(c.rel_l2_err, 1e-4) << p.model << " case " << c.index;
    EXPECT_TRUE(c.greedy_match) << p.model << " case " << c.index << " first mismatch " << c.first_mismatch;
  }
  EXPECT_TRUE(report.pass);
}

std::vector<GoldenParam> golden_params() {
  std::vector<GoldenParam> out;
  for (const char* m : {"tiny-llama", "tiny-qwen2", "tiny-deepseek-v2", "tiny-deepseek-v3",
                        "small-deepseek-v3-fp8", "deepseek-v3-tiny-code"}) {
    for (int64_t chunk : {0, 5, 64}) out.push_back({m, chunk});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(golden_params()),
                         [](const ::testing::TestParamInfo<GoldenParam>& info) {
                           std::string n = info.param.model + "_chunk" + std::to_string(info.param.chunk);
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// Two sequences in one BatchPlan (one prefilling, one decoding, interleaved blocks) give the same logits
// as running each alone.
class BatchedForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedForwardTest, BatchedEqualsSeparate) {
  CpuBackend backend;
  LoadOptions options;
  options.progress = false;
  auto model = load_model(model_dir(GetParam()), backend, options);
  const int64_t V = model->config().vocab_size;
  std::vector<int32_t> a = {3, 17, 42, 5, 9, 11, 2, 7, 30, 31, 4};
  std::vector<int32_t> b = {8, 1, 6, 14, 22};
  for (int32_t& t : a) t %= static_cast<int32_t>(V);
  for (int32_t& t : b) t %= static_cast<int32_t>(V);

  // Reference: each sequence alone. Sequence a: all tokens; sequence b: 4-token prefix then 1 more token.
  SequenceRunner ra(*model, 64, 4);
  Tensor ref_a = ra.append(a, true);  // [11, V]
  SequenceRunner rb(*model, 64, 4);
  rb.append(std::vector<int32_t>(b.begin(), b.end() - 1));
  Tensor ref_b = rb.append({b.back()});  // [1, V]

  // Batched: b's prefix first (alone) into blocks 5 and 2, then one plan with a's 11 tokens (blocks 0, 3, 1)
  // and b's last token.
  KvCache cache(model->kv_layout(), 8, 4);
  BatchPlan pre;
  pre.block_size = 4;
  for (int i = 0; i < 4; ++i) {
    pre.token_ids.push_back(b[i]);
    pre.positions.push_back(i);
    pre.slot_mapping.push_back(5 * 4 + i);
  }
  pre.cu_seqlens = {0, 4};
  pre.context_lens = {4};
  pre.block_table_indptr = {0, 1};
  pre.block_table = {5};
  pre.logits_rows = {3};
  pre.seq_ids = {1};
  model->forward(pre, cache);

  BatchPlan plan;
  plan.block_size = 4;
  const std::vector<int32_t> a_blocks = {0, 3, 1};
  for (int i = 0; i < 11; ++i) {
    plan.token_ids.push_back(a[i]);
    plan.positions.push_back(i);
    plan.slot_mapping.push_back(a_blocks[i / 4] * 4 + i % 4);
  }
  plan.token_ids.push_back(b[4]);
  plan.positions.push_back(4);
  plan.slot_mapping.push_back(2 * 4 + 0);
  plan.cu_seqlens = {0, 11, 12};
  plan.context_lens = {11, 5};
  plan.block_table_indptr = {0, 3, 5};
  plan.block_table = {0, 3, 1, 5, 2};
  for (int i = 0; i < 12; ++i) plan.logits_rows.push_back(i);
  plan.seq_ids = {0, 1};
  plan.validate(cache.num_blocks());
  Tensor out = model->forward(plan, cache);  // [12, V]
  ASSERT_EQ(out.dim(0), 12);
  double max_diff = 0.0;
  for (int64_t r = 0; r < 11; ++r)
    for (int64_t v = 0; v < V; ++v)
      max_diff = std::max(max_diff, std::abs(double(out.f32()[r * V + v]) - ref_a.f32()[r * V + v]));
  for (int64_t v = 0; v < V; ++v)
    max_diff = std::max(max_diff, std::abs(double(out.f32()[11 * V + v]) - ref_b.f32()[v]));
  EXPECT_LT(max_diff, 1e-4) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchedForwardTest,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-deepseek-v2", "tiny-deepseek-v3",
                                           "small-deepseek-v3-fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace dsinfer
