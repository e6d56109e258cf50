// Prompt scoring (SamplingParams::prompt_logprobs, the server's echo with logprobs) on the CPU engine: every
// prompt token after the first gets the log-softmax score of one full forward pass over the prompt, with its
// alternatives, for every architecture; under a small per-step row budget (prompts split across steps),
// async scheduling, preemption and prefix-cache hits of other requests; scoring does not change what is
// generated; max_tokens 0 scores alone; a cancel mid-scoring ends cleanly; bad values are refused.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "../fixture_models.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "event_gate.h"
#include "prompt_scores.h"

namespace dsinfer {
namespace {

std::unique_ptr<Engine> cpu_engine(const std::string& name, EngineConfig config) {
  auto backend = std::make_unique<CpuBackend>();
  std::unique_ptr<Model> model = load_fixture_model(name, *backend);
  config.cpu_kv_cache_bytes = int64_t{16} << 20;
  return make_engine(config, std::move(backend), std::move(model), std::nullopt);
}

SamplingParams greedy(int32_t max_tokens, int32_t prompt_logprobs) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  p.prompt_logprobs = prompt_logprobs;
  return p;
}

struct ScoringSetup {
  std::string name;
  int32_t block_size;
  int32_t chunk;
  int32_t max_num_tokens;
  int32_t rows;       // max_prompt_logprob_rows
  int64_t kv_tokens;  // 0: the byte budget
  bool async;
};

struct ScoringCase {
  std::string model;
  ScoringSetup setup;
};

class PromptScoringTest : public ::testing::TestWithParam<ScoringCase> {};

TEST_P(PromptScoringTest, ScoresEqualOneFullForwardPassAndLeaveGenerationAlone) {
  const ScoringCase& param = GetParam();
  CpuBackend ref_backend;
  std::unique_ptr<Model> ref = load_fixture_model(param.model, ref_backend);
  const int32_t vocab = static_cast<int32_t>(ref->config().vocab_size);
  std::mt19937 rng(11);
  auto random_prompt = [&](int32_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return v;
  };
  // Each scored prompt twice: unscored (submitted first, so its blocks may be cached before the scored copy
  // is admitted) and scored; the first scored with 3 alternatives, the rest with 0, 1 and 5.
  const std::vector<int32_t> lengths = {45, 1, 2, 9, 30, 70};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::vector<int32_t> prompt = random_prompt(lengths[i]);
    prompts.push_back(prompt);
    params.push_back(greedy(3, -1));
    prompts.push_back(prompt);
    params.push_back(greedy(3, std::vector<int32_t>{3, 0, 1, 5}[i % 4]));
  }
  prompts.push_back(prompts[0]);  // scored alone: max_tokens 0
  params.push_back(greedy(0, 2));

  EngineConfig config;
  config.kv_block_size = param.setup.block_size;
  config.context_chunk_size = param.setup.chunk;
  config.max_num_tokens = param.setup.max_num_tokens;
  config.max_prompt_logprob_rows = param.setup.rows;
  config.max_tokens_in_paged_kv_cache = param.setup.kv_tokens;
  config.async_scheduling_on_cpu = param.setup.async;
  std::unique_ptr<Engine> engine = cpu_engine(param.model, config);
  const std::vector<ScoredOutcome> out = run_scored(*engine, prompts, params);
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const ScoredOutcome& o = out[i];
    const std::string what = param.model + " request " + std::to_string(i);
    ASSERT_TRUE(o.finished && o.error.empty()) << what << ": " << o.error;
    EXPECT_EQ(o.reason, FinishReason::kLength) << what;
    EXPECT_EQ(o.usage.completion_tokens, params[i].max_tokens) << what;
    EXPECT_EQ(o.tokens.size(), static_cast<size_t>(params[i].max_tokens)) << what;
    if (params[i].prompt_logprobs < 0) {
      EXPECT_EQ(o.score_events, 0) << what;
      continue;
    }
    EXPECT_EQ(o.usage.cached_tokens, 0) << what;  // a scored prompt is computed in full
    if (prompts[i].size() == 1) {
      EXPECT_EQ(o.score_events, 0) << what;  // nothing to score
      continue;
    }
    EXPECT_EQ(o.score_events, 1) << what;  // all of them, once, in the first event
    expect_scores_near(o.scores, reference_scores(*ref, prompts[i], params[i].prompt_logprobs), 1e-3f, what);
    if (params[i].max_tokens > 0) {
      EXPECT_EQ(o.tokens, out[i - 1].tokens) << what << ": scoring changed the generated tokens";
    } else {
      EXPECT_EQ(o.events, 1) << what;
    }
  }
  engine->shutdown();
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv_blocks_used, 0);
  if (param.setup.kv_tokens > 0) {
    EXPECT_GT(stats.preemptions, 0);
  }
}

std::vector<ScoringCase> scoring_cases() {
  const std::vector<ScoringSetup> setups = {
      {"rows_7_sync", 4, 8, 32, 7, 0, false},
      {"rows_7_async", 4, 8, 32, 7, 0, true},
      {"rows_64_preempts", 8, 16, 64, 64, 160, false},
  };
  std::vector<ScoringCase> out;
  for (const char* m : {"tiny-llama", "tiny-qwen2", "tiny-deepseek-v2", "tiny-deepseek-v3",
                        "tiny-deepseek-v32", "tiny-deepseek-v4"}) {
    for (const ScoringSetup& s : setups) out.push_back({m, s});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, PromptScoringTest, ::testing::ValuesIn(scoring_cases()),
                         [](const ::testing::TestParamInfo<ScoringCase>& info) {
                           std::string n = info.param.model + "_" + info.param.setup.name;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// A scored request cancelled while its prompt is still being scored (a small row budget keeps it in prefill
// for many steps) ends with one abort event and no scores; its rows of a step in flight (async) are dropped;
// the request beside it is unaffected and the pool ends empty.
TEST(PromptScoringApi, CancelMidScoringEndsCleanly) {
  for (const bool async : {false, true}) {
    EngineConfig config;
    config.kv_block_size = 4;
    config.context_chunk_size = 8;
    config.max_prompt_logprob_rows = 4;
    config.async_scheduling_on_cpu = async;
    // The engine thread waits in the other request's second-token event until the cancel is queued
    // (EventGate), so the scored prompt cannot finish first however the threads are scheduled.
    EventGate gate;
    std::unique_ptr<Engine> engine = cpu_engine("tiny-llama", config);
    std::mutex mutex;
    std::condition_variable cv;
    int other_tokens = 0, scored_events = 0;
    bool other_done = false, scored_done = false;
    RequestEvent scored_last;
    GenerationRequest other;
    other.prompt_ids = {3, 4, 5};
    other.sampling = greedy(6, -1);
    other.on_event = [&](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      other_tokens += static_cast<int>(e.token_ids.size());
      other_done = other_done || e.finished;
      cv.notify_all();
    };
    other.on_event = gate.wrap(other.on_event, 2);
    GenerationRequest scored;
    for (int i = 0; i < 160; ++i) scored.prompt_ids.push_back((i * 13 + 7) % 250);
    scored.sampling = greedy(4, 2);
    scored.on_event = [&](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      ++scored_events;
      scored_done = scored_done || e.finished;
      scored_last = e;
      cv.notify_all();
    };
    std::vector<GenerationRequest> both;
    both.push_back(std::move(other));
    both.push_back(std::move(scored));
    const std::vector<uint64_t> ids = engine->submit_all(std::move(both));
    {
      std::unique_lock<std::mutex> lock(mutex);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return other_tokens >= 2; }));
      EXPECT_EQ(scored_events, 0) << "160 positions at 4 a step cannot be scored in a few steps";
    }
    engine->cancel(ids[1]);
    gate.release();
    {
      std::unique_lock<std::mutex> lock(mutex);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return other_done && scored_done; }));
      EXPECT_EQ(scored_events, 1) << "async " << async;
      EXPECT_EQ(scored_last.finish_reason, FinishReason::kAbort);
      EXPECT_EQ(scored_last.error, "cancelled");
      EXPECT_TRUE(scored_last.prompt_logprobs.empty());
      EXPECT_EQ(other_tokens, 6);
    }
    engine->shutdown();
    EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  }
}

TEST(PromptScoringApi, RefusesBadValues) {
  std::unique_ptr<Engine> engine = cpu_engine("tiny-llama", EngineConfig{});
  GenerationRequest r;
  r.prompt_ids = {5, 6, 7};
  r.sampling = greedy(0, -1);  // nothing to generate and nothing to score
  EXPECT_THROW(engine->submit(r), Error);
  r.sampling = greedy(4, SamplingParams::kMaxLogprobs + 1);
  EXPECT_THROW(engine->submit(r), Error);
  r.sampling = greedy(4, -2);
  EXPECT_THROW(engine->submit(r), Error);
  EngineConfig no_rows;
  no_rows.max_prompt_logprob_rows = 0;
  EXPECT_THROW(cpu_engine("tiny-llama", no_rows), Error);
}

}  // namespace
}  // namespace dsinfer
