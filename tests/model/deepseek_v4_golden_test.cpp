// DeepSeek-V4 end to end on the CPU reference: both fixture goldens (transformers 5.17 logits and greedy
// continuations) with one-shot and chunked prefill, and several sequences batched in one BatchPlan giving
// the same logits as each sequence alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/golden_eval.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {
namespace {

const std::string kModels = std::string(DSINFER_TEST_DATA) + "/models/";

struct GoldenParam {
  const char* model;
  int64_t chunk;
};

class DeepseekV4Golden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(DeepseekV4Golden, MatchesTransformers) {
  CpuBackend backend;
  const std::string dir = kModels + GetParam().model;
  LoadOptions load;
  load.progress = false;
  auto model = load_model(dir, backend, load);
  GoldenOptions options;
  options.prefill_chunk = GetParam().chunk;
  GoldenReport report = run_golden(*model, dir + "/golden.safetensors", options);
  ASSERT_EQ(report.cases.size(), 3u);
  for (const GoldenCase& c : report.cases) {
    EXPECT_LE(c.rel_l2_err, 1e-4) << "case " << c.index << " (" << c.tokens << " tokens)";
    EXPECT_TRUE(c.greedy_match) << "case " << c.index << " first mismatch at " << c.first_mismatch;
  }
  EXPECT_TRUE(report.pass);
}

// The indexer's tie rule decides the fixture's long prompts: with 2 indexer heads many compressed rows score
// exactly 0 (and for a token whose head weights are both negative, 0 is the top score), so the
// lowest-position rule (torch.topk on CUDA, the GPU backend's) keeps other rows than the CPU-made golden's
// torch CPU rule, and the logits drift far beyond rounding. This is why the GPU backend is checked against
// this golden only for the prompt the rule cannot touch (7 tokens: every visible row is kept) and otherwise
// against the CPU set to the same rule (scripts/gpu_check.sh: "cpu ties").
TEST(DeepseekV4Golden, LowestPositionTiesMoveTheLongPrompts) {
  CpuBackend backend;
  backend.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  const std::string dir = kModels + "tiny-deepseek-v4";
  LoadOptions load;
  load.progress = false;
  auto model = load_model(dir, backend, load);
  GoldenReport report = run_golden(*model, dir + "/golden.safetensors", GoldenOptions{});
  ASSERT_EQ(report.cases.size(), 3u);
  EXPECT_LE(report.cases[0].rel_l2_err, 1e-4);  // 7 tokens: nothing to choose
  EXPECT_GT(std::max(report.cases[1].rel_l2_err, report.cases[2].rel_l2_err), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DeepseekV4Golden,
    ::testing::Values(GoldenParam{"tiny-deepseek-v4", 0}, GoldenParam{"tiny-deepseek-v4", 5},
                      GoldenParam{"tiny-deepseek-v4", 64}, GoldenParam{"small-deepseek-v4-fp8-fp4", 0},
                      GoldenParam{"small-deepseek-v4-fp8-fp4", 5},
                      GoldenParam{"small-deepseek-v4-fp8-fp4", 64}),
    [](const ::testing::TestParamInfo<GoldenParam>& info) {
      std::string name = std::string(info.param.model) + "_chunk" + std::to_string(info.param.chunk);
      for (char& ch : name) ch = (ch == '-') ? '_' : ch;
      return name;
    });

// Two sequences of different lengths prefilled in one plan (interleaved block tables), then one decode step
// each in a second shared plan, against each sequence run alone.
TEST(DeepseekV4Batch, BatchedSequencesMatchSingleRuns) {
  CpuBackend backend;
  LoadOptions load;
  load.progress = false;
  auto model = load_model(kModels + "tiny-deepseek-v4", backend, load);
  const int64_t V = model->config().vocab_size, bs = 16;
  std::vector<std::vector<int32_t>> prompts(2);
  for (int i = 0; i < 37; ++i) prompts[0].push_back((i * 7 + 3) % 500 + 2);
  for (int i = 0; i < 140; ++i) prompts[1].push_back((i * 13 + 5) % 500 + 2);
  const std::vector<int32_t> next = {11, 42};

  std::vector<Tensor> alone(2);  // logits of the decode token
  for (int s = 0; s < 2; ++s) {
    SequenceRunner runner(*model, 256, bs, 100 + s);
    runner.append(prompts[s]);
    alone[s] = runner.append({next[s]});
  }

  KvCache cache(model->kv_layout(), 32, bs);
  // Sequence s owns blocks s, s + 2, s + 4, ...
  auto plan_for = [&](const std::vector<std::vector<int32_t>>& toks, const std::vector<int32_t>& start) {
    BatchPlan plan;
    plan.block_size = static_cast<int32_t>(bs);
    plan.cu_seqlens = {0};
    plan.block_table_indptr = {0};
    for (int s = 0; s < 2; ++s) {
      const int32_t ctx = start[s] + static_cast<int32_t>(toks[s].size());
      for (size_t i = 0; i < toks[s].size(); ++i) {
        plan.token_ids.push_back(toks[s][i]);
        plan.positions.push_back(start[s] + static_cast<int32_t>(i));
      }
      plan.cu_seqlens.push_back(static_cast<int32_t>(plan.token_ids.size()));
      plan.context_lens.push_back(ctx);
      const int32_t blocks = (ctx + bs - 1) / bs;
      for (int32_t b = 0; b < blocks; ++b) plan.block_table.push_back(s + 2 * b);
      plan.block_table_indptr.push_back(static_cast<int32_t>(plan.block_table.size()));
      plan.seq_ids.push_back(200 + s);
      plan.logits_rows.push_back(plan.cu_seqlens.back() - 1);
    }
    for (int s = 0; s < 2; ++s) {
      for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t)
        plan.slot_mapping.push_back(plan.slot_of(s, plan.positions[t]));
    }
    plan.validate(cache.num_blocks());
    return plan;
  };
  model->forward(plan_for(prompts, {0, 0}), cache);
  Tensor batched = model->forward(plan_for({{next[0]}, {next[1]}}, {static_cast<int32_t>(prompts[0].size()),
                                                                    static_cast<int32_t>(prompts[1].size())}),
                                  cache);  // [2, V]
  for (int s = 0; s < 2; ++s) {
    double max_diff = 0;
    for (int64_t v = 0; v < V; ++v)
      max_diff =
          std::max(max_diff, std::abs(static_cast<double>(batched.f32()[s * V + v]) - alone[s].f32()[v]));
    EXPECT_LT(max_diff, 1e-4) << "sequence " << s;
  }
  model->release_sequence(200);
  model->release_sequence(201);
}

}  // namespace
}  // namespace dsinfer
