// Async scheduling on the CPU backend (EngineConfig::async_scheduling_on_cpu): the engine's outputs are
// token-identical with the one-step lookahead on and off, for greedy and seeded sampling with penalties, with
// sequences ending mid-batch on max_tokens and on stop tokens (their speculative rows dropped), under
// chunked prefill, preemption by a tiny KV pool and prefix-cache hits; with stop strings and EOS through a
// tokenizer; with cancellation and shutdown while a step is in flight. Nothing reaches a request after its
// final event, and every block is free at the end.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine_impl.h"
#include "event_gate.h"
#include "model/model.h"
#include "model/model_config.h"
#include "tiny_code_requests.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {
namespace {

std::string model_dir(const std::string& name) {
  if (name == "deepseek-v3-tiny-code") return std::string(DSINFER_SOURCE_DIR) + "/models/" + name;
  return std::string(DSINFER_TEST_DATA) + "/models/" + name;
}

// Every request's tokens, text, finish and usage; counts events that arrive after a request's final one.
class Recorder {
 public:
  struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::string error;
    Usage usage;
  };
  std::function<void(const RequestEvent&)> callback() {
    return [this](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      Result& r = results_[e.request_id];
      if (r.finished) ++late_events_;
      r.tokens.insert(r.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      r.text += e.text;
      if (e.finished) {
        r.finished = true;
        r.reason = e.finish_reason;
        r.error = e.error;
        r.usage = e.usage;
      }
      cv_.notify_all();
    };
  }
  void wait_finished(const std::vector<uint64_t>& ids) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ok = cv_.wait_for(lock, std::chrono::seconds(300), [&] {
      for (uint64_t id : ids)
        if (!results_[id].finished) return false;
      return true;
    });
    ASSERT_TRUE(ok) << "requests did not finish";
  }
  void wait_tokens(uint64_t id, size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, std::chrono::seconds(300),
                 [&] { return results_[id].tokens.size() >= n || results_[id].finished; });
  }
  Result get(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_[id];
  }
  int late_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    return late_events_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<uint64_t, Result> results_;
  int late_events_ = 0;
};

struct Scenario {
  std::string name;
  int32_t block_size;
  int32_t chunk_size;
  int32_t max_num_tokens;
  int32_t max_batch_size;
  int64_t kv_tokens;  // 0: the default byte budget
  bool staggered;
};

std::vector<Scenario> scenarios() {
  return {
      {"all_at_once", 16, 32, 256, 16, 0, false},
      {"chunked_staggered", 4, 7, 30, 5, 0, true},
      {"tiny_token_budget", 16, 16, 9, 3, 0, false},
      {"tiny_kv_preempts", 8, 16, 64, 8, 160, false},
  };
}

struct Case {
  std::string model;
  Scenario scenario;
};

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// Short and long prompts (some sharing a 40-token prefix), greedy and seeded sampling with penalties,
// different max_tokens.
std::vector<Request> make_requests(int32_t vocab, int64_t context) {
  std::mt19937 rng(5);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return v;
  };
  const std::vector<int32_t> shared = random_tokens(40);
  const int32_t lengths[] = {1, 5, 17, 33, 64, 90, 3, 50, 9, 21};
  std::vector<Request> out;
  for (int i = 0; i < 10; ++i) {
    Request r;
    if (i % 3 == 1) r.prompt = shared;
    const std::vector<int32_t> tail = random_tokens(lengths[i]);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.params.ignore_eos = true;
    r.params.max_tokens = std::min<int32_t>(4 + static_cast<int32_t>(rng() % 16),
                                            static_cast<int32_t>(context - r.prompt.size()));
    if (i % 2 == 0) {
      r.params.temperature = 0.0f;
    } else {
      r.params.temperature = 0.9f;
      r.params.top_p = 0.95f;
      r.params.top_k = 40;
      r.params.seed = 100 + static_cast<uint64_t>(i);
      r.params.repetition_penalty = 1.2f;
      r.params.frequency_penalty = 0.3f;
      r.params.presence_penalty = 0.2f;
    }
    out.push_back(std::move(r));
  }
  return out;
}

struct RunResult {
  std::vector<Recorder::Result> results;
  EngineStats stats;
  int late_events = 0;
};

RunResult run(const std::string& model, const Scenario& sc, const std::vector<Request>& requests,
              bool async) {
  auto backend = std::make_unique<CpuBackend>();
  LoadOptions options;
  options.progress = false;
  std::unique_ptr<Model> m = load_model(model_dir(model), *backend, options);
  EngineConfig c;
  c.kv_block_size = sc.block_size;
  c.context_chunk_size = sc.chunk_size;
  c.max_num_tokens = sc.max_num_tokens;
  c.max_batch_size = sc.max_batch_size;
  c.max_tokens_in_paged_kv_cache = sc.kv_tokens;
  c.cpu_kv_cache_bytes = int64_t{64} << 20;
  c.async_scheduling = async;
  c.async_scheduling_on_cpu = async;
  std::unique_ptr<Engine> engine = make_engine(c, std::move(backend), std::move(m), std::nullopt);
  Recorder rec;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest r;
    r.prompt_ids = requests[i].prompt;
    r.sampling = requests[i].params;
    r.on_event = rec.callback();
    ids.push_back(engine->submit(std::move(r)));
    if (sc.staggered && i % 2 == 1) rec.wait_tokens(ids.back(), 2);
  }
  rec.wait_finished(ids);
  engine->shutdown();
  RunResult out;
  for (uint64_t id : ids) out.results.push_back(rec.get(id));
  out.stats = engine->stats();
  out.late_events = rec.late_events();
  return out;
}

class AsyncSchedulingTest : public ::testing::TestWithParam<Case> {};

TEST_P(AsyncSchedulingTest, OutputsEqualSynchronousSteps) {
  const Case& param = GetParam();
  ModelConfig config = load_model_config(model_dir(param.model));
  std::vector<Request> requests =
      make_requests(static_cast<int32_t>(config.vocab_size), config.max_position_embeddings);
  // Stop tokens end some sequences at a step nobody can predict: the third token of every third request's
  // free run (when it did not occur before), so its speculative row in the next step must be dropped.
  const RunResult free_run = run(param.model, param.scenario, requests, false);
  int stops = 0;
  for (size_t i = 0; i < requests.size(); i += 3) {
    const std::vector<int32_t>& t = free_run.results[i].tokens;
    if (t.size() > 3 && t[0] != t[2] && t[1] != t[2]) {
      requests[i].params.stop_token_ids = {t[2]};
      ++stops;
    }
  }
  const RunResult sync = run(param.model, param.scenario, requests, false);
  const RunResult async = run(param.model, param.scenario, requests, true);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Recorder::Result& a = async.results[i];
    const Recorder::Result& s = sync.results[i];
    EXPECT_TRUE(a.error.empty()) << a.error;
    EXPECT_EQ(a.tokens, s.tokens) << param.model << " " << param.scenario.name << " request " << i;
    EXPECT_EQ(a.reason, s.reason) << "request " << i;
    EXPECT_EQ(a.usage.completion_tokens, s.usage.completion_tokens) << "request " << i;
    EXPECT_EQ(a.usage.prompt_tokens, s.usage.prompt_tokens) << "request " << i;
    if (!requests[i].params.stop_token_ids.empty()) {
      EXPECT_EQ(s.reason, FinishReason::kStop) << "request " << i;
    }
  }
  EXPECT_GT(stops, 0);
  EXPECT_EQ(async.late_events, 0);
  EXPECT_EQ(sync.stats.fed_tokens, 0);
  EXPECT_GT(async.stats.fed_tokens, 0);       // the async path ran
  EXPECT_GT(async.stats.dropped_entries, 0);  // a sequence ended with a row in the next step
  EXPECT_EQ(async.stats.kv_blocks_used, 0);
  EXPECT_EQ(async.stats.running, 0);
  EXPECT_EQ(async.stats.waiting, 0);
  if (param.scenario.kv_tokens > 0) {
    EXPECT_GT(async.stats.preemptions, 0);
  }
  if (param.scenario.staggered) {
    EXPECT_GT(async.stats.prefix_cache_hit_tokens, 0);
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* m : {"tiny-llama", "tiny-deepseek-v3"})
    for (const Scenario& s : scenarios()) out.push_back({m, s});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, AsyncSchedulingTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string n = info.param.model + "_" + info.param.scenario.name;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// Stop strings (held back across deltas), EOS and seeded sampling with penalties through the tokenizer:
// text, ids and finish reasons equal with async scheduling on and off.
TEST(AsyncSchedulingTokenizer, StopStringsAndEosMatch) {
  const std::string dir = model_dir("deepseek-v3-tiny-code");
  Tokenizer tok = Tokenizer::load(dir);
  const std::vector<std::pair<std::string, SamplingParams>> cases = tiny_code_requests();

  struct Got {
    std::string text;
    std::vector<int32_t> ids;
    FinishReason reason = FinishReason::kNone;
  };
  auto run_all = [&](bool async, EngineStats* stats) {
    EngineConfig config;
    config.model_dir = dir;
    config.cpu_kv_cache_bytes = int64_t{64} << 20;
    config.kv_block_size = 16;
    config.context_chunk_size = 16;
    config.async_scheduling = async;
    config.async_scheduling_on_cpu = async;
    std::unique_ptr<Engine> engine = Engine::create(config);
    Recorder rec;
    std::vector<uint64_t> ids;
    for (const auto& [prompt, params] : cases) {
      GenerationRequest r;
      r.prompt_ids = tok.encode(prompt, true);
      r.sampling = params;
      r.on_event = rec.callback();
      ids.push_back(engine->submit(std::move(r)));
    }
    rec.wait_finished(ids);
    engine->shutdown();
    *stats = engine->stats();
    EXPECT_EQ(rec.late_events(), 0);
    std::vector<Got> out;
    for (uint64_t id : ids) {
      const Recorder::Result r = rec.get(id);
      out.push_back({r.text, r.tokens, r.reason});
    }
    return out;
  };
  EngineStats sync_stats, async_stats;
  const std::vector<Got> sync = run_all(false, &sync_stats);
  const std::vector<Got> async = run_all(true, &async_stats);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(async[i].ids, sync[i].ids) << "case " << i;
    EXPECT_EQ(async[i].text, sync[i].text) << "case " << i;
    EXPECT_EQ(async[i].reason, sync[i].reason) << "case " << i;
  }
  EXPECT_EQ(sync[1].reason, FinishReason::kStop);
  EXPECT_GT(async_stats.fed_tokens, 0);
  EXPECT_EQ(async_stats.kv_blocks_used, 0);
}

std::unique_ptr<Engine> tiny_engine(EngineConfig config, bool async = true) {
  auto backend = std::make_unique<CpuBackend>();
  LoadOptions options;
  options.progress = false;
  std::unique_ptr<Model> m = load_model(model_dir("tiny-llama"), *backend, options);
  config.cpu_kv_cache_bytes = int64_t{16} << 20;
  config.async_scheduling = async;
  config.async_scheduling_on_cpu = async;
  return make_engine(config, std::move(backend), std::move(m), std::nullopt);
}

GenerationRequest greedy_request(int32_t prompt_len, int32_t max_tokens, Recorder& rec, int32_t salt = 0) {
  GenerationRequest r;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back((i * 37 + 11 + salt) % 300);
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.sampling.max_tokens = max_tokens;
  r.on_event = rec.callback();
  return r;
}

// Cancelling decoding, prefilling and waiting requests while steps are in flight: each gets one final
// "cancelled" event and nothing after it; the request that keeps running produces the tokens it produces
// alone with synchronous steps; every block is free at the end.
TEST(AsyncSchedulingApi, CancelWhileStepsAreInFlight) {
  EngineConfig config;
  config.max_batch_size = 3;
  config.max_num_tokens = 16;
  config.kv_block_size = 4;
  config.context_chunk_size = 8;
  Recorder alone_rec;
  std::vector<int32_t> alone_tokens;
  {
    auto engine = tiny_engine(config, /*async=*/false);
    const uint64_t id = engine->submit(greedy_request(7, 40, alone_rec, 3));
    alone_rec.wait_finished({id});
    alone_tokens = alone_rec.get(id).tokens;
    engine->shutdown();
  }
  // The engine thread holds in the event of decoding's third token until the three cancels are queued, so
  // that no request can end on its own before them (prefill still has most of its 150-token prompt to run,
  // waiting has no batch slot until keep's 40 tokens are done). Declared before the engine.
  EventGate gate;
  Recorder rec;
  auto engine = tiny_engine(config);
  GenerationRequest decoding_request = greedy_request(6, 200, rec);
  decoding_request.on_event = gate.wrap(decoding_request.on_event, 3);
  const uint64_t keep = engine->submit(greedy_request(7, 40, rec, 3));
  const uint64_t decoding = engine->submit(std::move(decoding_request));
  const uint64_t prefill = engine->submit(greedy_request(150, 4, rec, 1));
  const uint64_t waiting = engine->submit(greedy_request(5, 10, rec, 2));
  rec.wait_tokens(decoding, 3);
  engine->cancel(decoding);
  engine->cancel(prefill);
  engine->cancel(waiting);
  gate.release();
  rec.wait_finished({keep, decoding, prefill, waiting});
  for (uint64_t id : {decoding, prefill, waiting}) {
    EXPECT_EQ(rec.get(id).reason, FinishReason::kAbort);
    EXPECT_EQ(rec.get(id).error, "cancelled");
  }
  EXPECT_LT(rec.get(decoding).tokens.size(), 200u);
  EXPECT_EQ(rec.get(keep).tokens, alone_tokens);
  EXPECT_EQ(rec.get(keep).reason, FinishReason::kLength);
  engine->shutdown();
  EXPECT_EQ(rec.late_events(), 0);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

// Shutdown with a step in flight: its results are dropped, the request ends once, the pool is free.
TEST(AsyncSchedulingApi, ShutdownWithAStepInFlight) {
  // The engine thread holds in the second token's event until the test is about to shut down, so that the
  // request cannot run to its 240 tokens first.
  EventGate gate;
  Recorder rec;
  auto engine = tiny_engine({});
  GenerationRequest request = greedy_request(10, 240, rec);
  request.on_event = gate.wrap(request.on_event, 2);
  const uint64_t id = engine->submit(std::move(request));
  rec.wait_tokens(id, 2);
  gate.release();
  engine->shutdown(std::chrono::milliseconds(0));
  const Recorder::Result r = rec.get(id);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.reason, FinishReason::kAbort);
  EXPECT_EQ(rec.late_events(), 0);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_GT(engine->stats().fed_tokens, 0);
}

// max_tokens = 1 and 2, a prompt at the edge of the context: a token that certainly ends its request is
// never computed speculatively, so these need no more cache than synchronous steps.
TEST(AsyncSchedulingApi, CertainEndsRunNoSpeculativeRow) {
  EngineConfig config;
  config.kv_block_size = 4;
  config.max_tokens_in_paged_kv_cache = 16;  // four blocks: 15 prompt tokens + 1 generated fill them
  auto engine = tiny_engine(config);
  Recorder rec;
  const uint64_t one = engine->submit(greedy_request(3, 1, rec));
  const uint64_t two = engine->submit(greedy_request(14, 2, rec, 1));
  rec.wait_finished({one, two});
  EXPECT_EQ(rec.get(one).tokens.size(), 1u);
  EXPECT_EQ(rec.get(two).tokens.size(), 2u);
  EXPECT_EQ(rec.get(two).reason, FinishReason::kLength) << rec.get(two).error;
  engine->shutdown();
  EXPECT_EQ(engine->stats().dropped_entries, 0);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace dsinfer
