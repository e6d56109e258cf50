// CUDA graphs (CudaGraphModel): decode steps replayed from graphs produce the same greedy tokens as eager
// steps, for batch sizes that fill a bucket exactly and ones that are padded, with sequences finishing at
// different steps, for a dense model, the MLA + MoE models, DeepSeek-V3.2 and V4. Runs on a GPU; skips
// elsewhere (CI compiles it).
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "cuda_test_models.h"
#include "dsinfer/engine.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

// Built with CUDA only: the tests that call it skip without (an unused function is an error).
#ifdef DSINFER_HAVE_CUDA
// Greedy completions of `prompts` (max_tokens[i] each) through an engine built from `config`.
std::vector<std::vector<int32_t>> run_greedy(EngineConfig config,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const std::vector<int32_t>& max_tokens, int64_t* graph_replays,
                                             int64_t* captures_at_start = nullptr,
                                             int64_t* captures_at_end = nullptr) {
  std::unique_ptr<Engine> engine = Engine::create(config);
  if (captures_at_start) *captures_at_start = engine->stats().cuda_graph_captures;
  std::mutex mutex;
  std::condition_variable done;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, size_t> index;
  size_t finished = 0;
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest& r = requests.emplace_back();
    r.prompt_ids = prompts[i];
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens[i];
    r.sampling.ignore_eos = true;
    r.on_event = [&](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      auto& t = tokens[e.request_id];
      t.insert(t.end(), e.token_ids.begin(), e.token_ids.end());
      EXPECT_TRUE(e.error.empty()) << e.error;
      if (e.finished) {
        ++finished;
        done.notify_all();
      }
    };
  }
  // One arrival, so that both runs schedule the same steps: a step's composition picks its kernels (and so
  // its bits), and requests submitted one by one race the engine thread's first steps.
  const std::vector<uint64_t> ids = engine->submit_all(std::move(requests));
  for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished == prompts.size(); });
  lock.unlock();
  *graph_replays = engine->stats().cuda_graph_replays;
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.cuda_graph_capture_failures, 0);
  // Every replayed bucket was captured once, and capturing took host time.
  EXPECT_EQ(stats.cuda_graph_replays > 0, stats.cuda_graph_captures > 0);
  EXPECT_EQ(stats.cuda_graph_captures > 0, stats.cuda_graph_capture_seconds > 0.0);
  if (config.cuda_graph_precapture_context == 0) {
    EXPECT_LE(stats.cuda_graph_captures, stats.cuda_graph_replays);
  }
  if (captures_at_end) *captures_at_end = stats.cuda_graph_captures;
  engine->shutdown();
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (auto& [id, t] : tokens) out[index.at(id)] = t;
  return out;
}

// The fixtures' engine for these tests: up to 16 sequences (batch buckets 1, 2, 4, 8, 16), 64 KV blocks
// of 16.
EngineConfig graph_test_config(const std::string& model) {
  EngineConfig config;
  config.model_dir = cuda_test_model_dir(model);
  config.device = "cuda";
  config.kv_block_size = 16;
  config.max_batch_size = 16;
  config.max_tokens_in_paged_kv_cache = 16 * 64;
  return config;
}
#endif

class CudaGraphTest : public ::testing::TestWithParam<std::string> {};

// Dense GQA (tiny-llama), MLA + DeepSeekMoE with device-side routing (tiny-deepseek-v2 / v3), V3.2's
// indexer + sparse MLA (tiny-deepseek-v32: its score rows follow the graph's context bucket) and V4
// (tiny-deepseek-v4: the compressors' closing rows found on the device, every 4 tokens on its CSA layers and
// at position 127 on its HCA layer, and its indexer's score rows sized by the context bucket).
INSTANTIATE_TEST_SUITE_P(Models, CudaGraphTest,
                         ::testing::Values("tiny-llama", "tiny-deepseek-v2", "tiny-deepseek-v3",
                                           "tiny-deepseek-v32", "tiny-deepseek-v4"),
                         [](const auto& info) { return model_param_name(info.param); });

TEST_P(CudaGraphTest, ReplayedDecodeMatchesEagerDecode) {
#ifdef DSINFER_HAVE_CUDA
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  EngineConfig config = graph_test_config(GetParam());
  // 1, 3 (padded to 4), 8 (exact) and 11 (padded to 16) sequences running at once, finishing at different
  // steps (so the batch shrinks through the buckets); the first runs to near the model's 256-token context.
  for (int n : {1, 3, 8, 11}) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int32_t> max_tokens;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p;
      for (int j = 0; j < 5 + 11 * i; ++j) p.push_back((7 * i + 13 * j + 1) % 250 + 1);
      prompts.push_back(p);
      max_tokens.push_back(i == 0 ? 250 - static_cast<int32_t>(p.size()) : 20 + 9 * i);
    }
    int64_t eager_replays = 0, replays = 0;
    config.cuda_graphs = false;
    const auto eager = run_greedy(config, prompts, max_tokens, &eager_replays);
    config.cuda_graphs = true;
    const auto graphed = run_greedy(config, prompts, max_tokens, &replays);
    EXPECT_EQ(eager_replays, 0);
    EXPECT_GT(replays, max_tokens[0] / 2) << n << " sequences";
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(eager[i].size(), static_cast<size_t>(max_tokens[i]));
      EXPECT_EQ(graphed[i], eager[i]) << GetParam() << ": sequence " << i << " of " << n;
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// Graphs recorded at startup (cuda_graph_precapture_context) serve every decode step: no capture after
// Engine::create, one graph per batch bucket (1, 2, 4, 8, 16) of the fixtures' one context bucket (256), and
// the same greedy tokens as eager steps with the batch shrinking through the buckets.
TEST_P(CudaGraphTest, PrecapturedGraphsServeEveryDecodeStep) {
#ifdef DSINFER_HAVE_CUDA
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  EngineConfig config = graph_test_config(GetParam());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < 11; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 4 + 9 * i; ++j) p.push_back((5 * i + 11 * j + 3) % 250 + 1);
    prompts.push_back(p);
    max_tokens.push_back(i == 0 ? 200 : 12 + 7 * i);
  }
  int64_t eager_replays = 0, replays = 0, at_start = 0, at_end = 0;
  config.cuda_graphs = false;
  const auto eager = run_greedy(config, prompts, max_tokens, &eager_replays);
  config.cuda_graphs = true;
  config.cuda_graph_precapture_context = 256;
  const auto graphed = run_greedy(config, prompts, max_tokens, &replays, &at_start, &at_end);
  EXPECT_EQ(at_start, 5) << "one graph per batch bucket 1, 2, 4, 8, 16";
  EXPECT_EQ(at_end, at_start) << "a decode step recorded a graph after startup";
  EXPECT_GT(replays, max_tokens[0] / 2);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(graphed[i], eager[i]) << GetParam() << ": sequence " << i;
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace dsinfer
