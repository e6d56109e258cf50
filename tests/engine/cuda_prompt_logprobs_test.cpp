// Prompt scoring (SamplingParams::prompt_logprobs) on the GPU engine: the scores of every prompt token after
// the first equal those of the GPU's own forward pass over each whole prompt (one sequence, every position's
// logits, log-softmax on the host) within bf16 batching noise, with a small per-step row budget (prompts
// split across steps), async scheduling and CUDA graphs for the decode steps that follow, next to unscored
// requests; max_tokens 0 scores alone. The reference is the GPU's and not the CPU's: on these random-weight
// MoE fixtures bf16 rounding flips near-tie routing decisions against fp32, which the goldens' margin rule
// handles (docs/benchmarks.md, "GPU correctness under the margin rule"). Runs on a GPU; skips elsewhere (CI
// compiles it).
#include <gtest/gtest.h>

#include "cuda_test_models.h"
#include "prompt_scores.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

class CudaPromptScoringTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Models, CudaPromptScoringTest,
                         ::testing::Values("tiny-llama", "tiny-deepseek-v2", "tiny-deepseek-v3"),
                         [](const auto& info) { return model_param_name(info.param); });

TEST_P(CudaPromptScoringTest, ScoresMatchTheCpuReference) {
#ifdef DSINFER_HAVE_CUDA
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  const std::string dir = cuda_test_model_dir(GetParam());
  CudaBackend gpu;
  LoadOptions options;
  options.progress = false;
  std::unique_ptr<Model> ref = load_model(dir, gpu, options);
  const int32_t vocab = static_cast<int32_t>(ref->config().vocab_size);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 3 + 23 * i; ++j) p.push_back((11 * i + 17 * j + 3) % vocab);
    prompts.push_back(p);
    SamplingParams s;
    s.temperature = 0.0f;
    s.ignore_eos = true;
    s.max_tokens = i == 5 ? 0 : 12;
    s.prompt_logprobs = i == 2 ? -1 : (i % 3) * 2;  // 0, 2 or 4 alternatives; one request unscored
    params.push_back(s);
  }
  EngineConfig config;
  config.model_dir = dir;
  config.device = "cuda";
  config.kv_block_size = 16;
  config.max_batch_size = 8;
  config.max_prompt_logprob_rows = 24;  // the longer prompts take several steps
  config.max_tokens_in_paged_kv_cache = 16 * 128;
  std::unique_ptr<Engine> engine = Engine::create(config);
  const std::vector<ScoredOutcome> out = run_scored(*engine, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = GetParam() + " request " + std::to_string(i);
    ASSERT_TRUE(out[i].finished && out[i].error.empty()) << what << ": " << out[i].error;
    EXPECT_EQ(out[i].tokens.size(), static_cast<size_t>(params[i].max_tokens)) << what;
    if (params[i].prompt_logprobs < 0) {
      EXPECT_EQ(out[i].score_events, 0) << what;
      continue;
    }
    EXPECT_EQ(out[i].score_events, 1) << what;
    // Batched and chunked (the engine) against one sequence in one pass (the reference), both bf16.
    expect_scores_near(out[i].scores, reference_scores(*ref, prompts[i], params[i].prompt_logprobs), 0.05f,
                       what);
  }
  engine->shutdown();
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_GT(engine->stats().cuda_graph_replays, 0);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace dsinfer
