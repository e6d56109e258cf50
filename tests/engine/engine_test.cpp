// Engine tests: batched greedy generation equals one-at-a-time greedy generation for every existing
// architecture under mixed workloads (short and long prompts, staggered arrivals, chunk sizes that do and do
// not divide the prompts, preemption forced by a tiny KV budget, prefix-cache hits); cancellation in every
// state; request validation; zero blocks in use afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "../fixture_models.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "event_gate.h"
#include "model/model.h"
#include "tiny_code_requests.h"

namespace dsinfer {
namespace {

// One-at-a-time greedy reference on a private SequenceRunner: the tokens generated for `prompt`.
std::vector<int32_t> reference_greedy(Model& model, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  SequenceRunner runner(model);
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler sampler(p, prompt);
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  std::vector<int32_t> out;
  Tensor logits = runner.append(prompt);
  while (true) {
    const int32_t token = sampler.sample(logits.f32(), vocab);
    sampler.accept(token);
    out.push_back(token);
    if (static_cast<int32_t>(out.size()) >= max_tokens) break;
    logits = runner.append({token});
  }
  return out;
}

// Collects every request's events (thread-safe) and waits for their final events.
class Collector {
 public:
  std::function<void(const RequestEvent&)> callback() {
    return [this](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      Result& r = results_[e.request_id];
      r.tokens.insert(r.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      r.events += 1;
      if (e.finished) {
        r.finished = true;
        r.reason = e.finish_reason;
        r.error = e.error;
        r.usage = e.usage;
      }
      done_.notify_all();
    };
  }
  struct Result {
    std::vector<int32_t> tokens;
    int events = 0;
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::string error;
    Usage usage;
  };
  void wait_finished(const std::vector<uint64_t>& ids) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ok = done_.wait_for(lock, std::chrono::seconds(300), [&] {
      for (uint64_t id : ids) {
        if (!results_[id].finished) return false;
      }
      return true;
    });
    ASSERT_TRUE(ok) << "requests did not finish";
  }
  // Waits until request `id` has received at least `n` tokens (or finished).
  void wait_tokens(uint64_t id, size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait_for(lock, std::chrono::seconds(300),
                   [&] { return results_[id].tokens.size() >= n || results_[id].finished; });
  }
  Result get(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_[id];
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::map<uint64_t, Result> results_;
};

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
};

// Short and long prompts (some sharing a long common prefix for prefix-cache hits) and varied lengths.
Workload make_workload(int32_t vocab, int64_t context, uint32_t seed) {
  std::mt19937 rng(seed);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return v;
  };
  const std::vector<int32_t> shared = random_tokens(40);
  Workload w;
  const int32_t lengths[] = {1, 5, 17, 33, 64, 90, 3, 50};
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt;
    if (i % 3 == 1) prompt = shared;  // shares a 40-token prefix
    std::vector<int32_t> tail = random_tokens(lengths[i]);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    w.prompts.push_back(prompt);
    w.max_tokens.push_back(std::min<int32_t>(4 + static_cast<int32_t>(rng() % 12),
                                             static_cast<int32_t>(context - prompt.size())));
  }
  return w;
}

struct Scenario {
  std::string name;
  int32_t block_size;
  int32_t chunk_size;
  bool chunked;
  int32_t max_num_tokens;
  int32_t max_batch_size;
  int64_t kv_tokens;  // 0: default byte budget
  bool staggered;
};

EngineConfig config_for(const Scenario& s) {
  EngineConfig c;
  c.kv_block_size = s.block_size;
  c.context_chunk_size = s.chunk_size;
  c.enable_chunked_context = s.chunked;
  c.max_num_tokens = s.max_num_tokens;
  c.max_batch_size = s.max_batch_size;
  c.max_tokens_in_paged_kv_cache = s.kv_tokens;
  c.cpu_kv_cache_bytes = int64_t{64} << 20;
  return c;
}

std::vector<Scenario> scenarios() {
  return {
      {"all_at_once", 16, 32, true, 256, 16, 0, false},
      {"chunk_divides_block", 8, 16, true, 64, 16, 0, true},
      {"chunk_not_divisible", 4, 7, true, 30, 5, 0, true},
      {"tiny_token_budget", 16, 16, true, 9, 3, 0, false},
      {"no_chunking", 16, 512, false, 256, 4, 0, true},
      {"tiny_kv_preempts", 8, 16, true, 64, 8, 160, false},
  };
}

struct EngineCase {
  std::string model;
  Scenario scenario;
};

class EngineEquivalenceTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(EngineEquivalenceTest, BatchedGreedyEqualsSequential) {
  const EngineCase& param = GetParam();
  CpuBackend ref_backend;
  std::unique_ptr<Model> ref_model = load_fixture_model(param.model, ref_backend);
  const int32_t vocab = static_cast<int32_t>(ref_model->config().vocab_size);
  const Workload w = make_workload(vocab, ref_model->config().max_position_embeddings, 7);
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    expected.push_back(reference_greedy(*ref_model, w.prompts[i], w.max_tokens[i]));
  }

  auto backend = std::make_unique<CpuBackend>();
  std::unique_ptr<Model> model = load_fixture_model(param.model, *backend);
  std::unique_ptr<Engine> engine =
      make_engine(config_for(param.scenario), std::move(backend), std::move(model), std::nullopt);
  Collector collector;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt_ids = w.prompts[i];
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = w.max_tokens[i];
    r.on_event = collector.callback();
    ids.push_back(engine->submit(std::move(r)));
    // Staggered arrivals: later requests join while earlier ones decode.
    if (param.scenario.staggered && i % 2 == 1) collector.wait_tokens(ids.back(), 2);
  }
  collector.wait_finished(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    Collector::Result r = collector.get(ids[i]);
    EXPECT_EQ(r.reason, FinishReason::kLength) << "request " << i << " " << r.error;
    EXPECT_EQ(r.tokens, expected[i]) << param.model << " " << param.scenario.name << " request " << i;
    EXPECT_EQ(r.usage.prompt_tokens, static_cast<int32_t>(w.prompts[i].size()));
    EXPECT_EQ(r.usage.completion_tokens, w.max_tokens[i]);
  }
  engine->shutdown();
  EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  if (param.scenario.kv_tokens > 0) {
    EXPECT_GT(stats.preemptions, 0);
  }
  // Prefix caching serves models whose cached rows depend on the prefix alone (not DeepSeek-V3.2 / V4,
  // whose indexers break exact top-k ties by the whole prompt's length).
  if (param.scenario.staggered && param.model.find("v4") == std::string::npos &&
      param.model.find("v32") == std::string::npos) {
    EXPECT_GT(stats.prefix_cache_hit_tokens, 0);
  }
}

std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> out;
  for (const char* m :
       {"tiny-llama", "tiny-qwen2", "tiny-deepseek-v2", "tiny-deepseek-v3", "small-deepseek-v3-fp8",
        "deepseek-v3-tiny-code", "tiny-deepseek-v32", "tiny-deepseek-v4", "small-deepseek-v4-fp8-fp4"}) {
    for (const Scenario& s : scenarios()) out.push_back({m, s});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, EngineEquivalenceTest, ::testing::ValuesIn(engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& info) {
                           std::string n = info.param.model + "_" + info.param.scenario.name;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// A fixture engine on tiny-llama for the API behaviour tests.
class EngineApiTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> make(EngineConfig config = {}) {
    auto backend = std::make_unique<CpuBackend>();
    std::unique_ptr<Model> model = load_fixture_model("tiny-llama", *backend);
    config.cpu_kv_cache_bytes = int64_t{16} << 20;
    return make_engine(config, std::move(backend), std::move(model), std::nullopt);
  }
  GenerationRequest request(int32_t prompt_len, int32_t max_tokens, Collector& c) {
    GenerationRequest r;
    for (int32_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back((i * 37 + 11) % 300);
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = max_tokens;
    r.on_event = c.callback();
    return r;
  }
};

// Precapturing CUDA graphs is a no-op for a model without graphs (the CPU backend), and a negative context
// is refused when the engine is made.
TEST_F(EngineApiTest, GraphPrecaptureSetting) {
  EngineConfig config;
  config.cuda_graph_precapture_context = 4096;
  auto engine = make(config);
  EXPECT_EQ(engine->stats().cuda_graph_captures, 0);
  Collector c;
  const uint64_t id = engine->submit(request(5, 3, c));
  c.wait_finished({id});
  EXPECT_EQ(c.get(id).tokens.size(), 3u);
  engine->shutdown();
  config.cuda_graph_precapture_context = -1;
  try {
    make(config);
    ADD_FAILURE() << "a negative cuda_graph_precapture_context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_graph_precapture_context must be >= 0"), std::string::npos)
        << e.what();
  }
}

TEST_F(EngineApiTest, RejectsInvalidRequests) {
  auto engine = make();
  Collector c;
  GenerationRequest empty = request(0, 4, c);
  EXPECT_THROW(engine->submit(empty), Error);
  GenerationRequest too_long = request(250, 10, c);  // context 256
  EXPECT_THROW(engine->submit(too_long), Error);
  GenerationRequest bad_id = request(4, 4, c);
  bad_id.prompt_ids[0] = 300;
  EXPECT_THROW(engine->submit(bad_id), Error);
  GenerationRequest bad_sampling = request(4, 4, c);
  bad_sampling.sampling.top_p = 0.0f;
  EXPECT_THROW(engine->submit(bad_sampling), Error);
  engine->shutdown();
  EXPECT_THROW(engine->submit(request(4, 4, c)), Error);
}

// submit_all validates every request before it enqueues any: a bad one (named by its index) or a queue
// without room for all of them enqueues nothing; otherwise the ids come in order and every request runs.
TEST_F(EngineApiTest, SubmitAllIsAllOrNone) {
  EngineConfig config;
  config.max_queue_length = 3;
  auto engine = make(config);
  Collector c;
  std::vector<GenerationRequest> with_bad;
  with_bad.push_back(request(4, 3, c));
  with_bad.push_back(request(0, 3, c));  // empty prompt
  with_bad.push_back(request(5, 3, c));
  try {
    engine->submit_all(std::move(with_bad));
    ADD_FAILURE() << "a batch with an empty prompt was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 1 of 3: the prompt is empty"), std::string::npos)
        << e.what();
  }
  std::vector<GenerationRequest> too_many;
  for (int i = 0; i < 4; ++i) too_many.push_back(request(4 + i, 3, c));
  try {
    engine->submit_all(std::move(too_many));
    ADD_FAILURE() << "4 requests were accepted into a queue of 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the request queue is full"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine->submit_all({}), Error);
  std::vector<GenerationRequest> good;
  for (int i = 0; i < 3; ++i) good.push_back(request(4 + i, 2 + i, c));
  const std::vector<uint64_t> ids = engine->submit_all(std::move(good));
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));  // the rejected batches took no ids
  c.wait_finished(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(c.get(ids[i]).reason, FinishReason::kLength);
    EXPECT_EQ(c.get(ids[i]).tokens.size(), 2 + i);
  }
  engine->shutdown();
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineApiTest, CancelInEveryState) {
  EngineConfig config;
  config.max_batch_size = 1;  // the second request waits while the first runs
  config.max_num_tokens = 8;  // the long prompt prefills in several chunks
  config.kv_block_size = 4;
  config.context_chunk_size = 4;
  // The engine thread holds in running's third-token event until both cancels are queued (EventGate), so
  // that neither request can end on its own first. Declared before the engine.
  EventGate gate;
  Collector c;
  auto engine = make(config);
  // Running (decoding): cancel after a few tokens.
  GenerationRequest running_request = request(6, 200, c);
  running_request.on_event = gate.wrap(running_request.on_event, 3);
  const uint64_t running = engine->submit(std::move(running_request));
  // Waiting behind it.
  const uint64_t waiting = engine->submit(request(5, 10, c));
  c.wait_tokens(running, 3);
  engine->cancel(waiting);
  engine->cancel(running);
  gate.release();
  c.wait_finished({running, waiting});
  EXPECT_EQ(c.get(running).reason, FinishReason::kAbort);
  EXPECT_EQ(c.get(running).error, "cancelled");
  EXPECT_LT(c.get(running).tokens.size(), 200u);
  EXPECT_EQ(c.get(waiting).reason, FinishReason::kAbort);
  EXPECT_TRUE(c.get(waiting).tokens.empty());
  // Right after submission (a cancel that may come before or during its prefill).
  const uint64_t later = engine->submit(request(120, 4, c));
  engine->cancel(later);
  c.wait_finished({later});
  // Finished and unknown ids are ignored.
  const uint64_t done = engine->submit(request(3, 2, c));
  c.wait_finished({done});
  engine->cancel(done);
  engine->cancel(987654);
  EXPECT_EQ(c.get(done).reason, FinishReason::kLength);
  EXPECT_EQ(c.get(done).events, 2);
  engine->shutdown();
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);

  // Mid-prefill: a 200-token prompt (50 chunks of 4) beside a decoding request in the same steps (two slots);
  // the engine holds in the decoding request's tenth-token event while the cancel is queued, when the prompt
  // has prefilled some of its chunks and not all, however the threads are scheduled.
  EngineConfig two = config;
  two.max_batch_size = 2;
  EventGate gate2;
  Collector c2;
  auto engine2 = make(two);
  GenerationRequest decoding = request(3, 100, c2);
  decoding.on_event = gate2.wrap(decoding.on_event, 10);
  std::vector<GenerationRequest> both;
  both.push_back(std::move(decoding));
  both.push_back(request(200, 4, c2));
  const std::vector<uint64_t> ids = engine2->submit_all(std::move(both));
  c2.wait_tokens(ids[0], 10);
  engine2->cancel(ids[1]);
  engine2->cancel(ids[0]);
  gate2.release();
  c2.wait_finished(ids);
  EXPECT_EQ(c2.get(ids[1]).reason, FinishReason::kAbort);
  EXPECT_EQ(c2.get(ids[1]).error, "cancelled");
  EXPECT_TRUE(c2.get(ids[1]).tokens.empty());
  EXPECT_EQ(c2.get(ids[0]).reason, FinishReason::kAbort);
  engine2->shutdown();
  EXPECT_EQ(engine2->stats().kv_blocks_used, 0);
}

TEST_F(EngineApiTest, PrefixCacheReportsCachedTokens) {
  EngineConfig config;
  config.kv_block_size = 16;
  auto engine = make(config);
  Collector c;
  const uint64_t first = engine->submit(request(70, 2, c));
  c.wait_finished({first});
  const uint64_t second = engine->submit(request(70, 2, c));  // the same prompt
  c.wait_finished({second});
  EXPECT_EQ(c.get(first).usage.cached_tokens, 0);
  EXPECT_EQ(c.get(second).usage.cached_tokens, 64);  // 4 full blocks; the last token is recomputed
  EXPECT_EQ(c.get(first).tokens, c.get(second).tokens);
  engine->shutdown();
  EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);
}

TEST_F(EngineApiTest, Logprobs) {
  auto engine = make();
  Collector c;
  GenerationRequest r = request(5, 3, c);
  r.sampling.logprobs = 3;
  std::vector<RequestEvent> events;
  std::mutex m;
  auto inner = r.on_event;
  r.on_event = [&](const RequestEvent& e) {
    {
      std::lock_guard<std::mutex> lock(m);
      events.push_back(e);
    }
    inner(e);
  };
  const uint64_t id = engine->submit(std::move(r));
  c.wait_finished({id});
  std::lock_guard<std::mutex> lock(m);
  ASSERT_EQ(events.size(), 3u);
  for (const RequestEvent& e : events) {
    ASSERT_EQ(e.logprobs.size(), 1u);
    EXPECT_EQ(e.logprobs[0].token, e.token_ids[0]);
    ASSERT_EQ(e.logprobs[0].top.size(), 3u);
    EXPECT_EQ(e.logprobs[0].top[0].first, e.token_ids[0]);  // greedy picks the most likely token
    EXPECT_LE(e.logprobs[0].logprob, 0.0f);
  }
  EXPECT_TRUE(events.back().finished);
  EXPECT_GE(events.back().first_token, events.back().arrival);
}

TEST_F(EngineApiTest, HigherPriorityRunsFirstFcfsWithin) {
  EngineConfig config;
  config.max_batch_size = 1;  // one sequence at a time: the order of first tokens is the admission order
  auto engine = make(config);
  std::mutex m;
  std::vector<uint64_t> first_token_order;
  Collector c;
  auto track = [&](GenerationRequest r, int32_t priority) {
    r.priority = priority;
    auto inner = r.on_event;
    auto seen = std::make_shared<bool>(false);
    r.on_event = [&, inner, seen](const RequestEvent& e) {
      if (!*seen && !e.token_ids.empty()) {
        *seen = true;
        std::lock_guard<std::mutex> lock(m);
        first_token_order.push_back(e.request_id);
      }
      inner(e);
    };
    return r;
  };
  const uint64_t blocker = engine->submit(track(request(4, 100, c), 0));
  c.wait_tokens(blocker, 1);
  const uint64_t low_a = engine->submit(track(request(4, 3, c), 0));
  const uint64_t low_b = engine->submit(track(request(5, 3, c), 0));
  const uint64_t high = engine->submit(track(request(6, 3, c), 7));
  c.wait_finished({blocker, low_a, low_b, high});
  std::lock_guard<std::mutex> lock(m);
  EXPECT_EQ(first_token_order, (std::vector<uint64_t>{blocker, high, low_a, low_b}));
}

TEST_F(EngineApiTest, ShutdownCancelsWhatRemains) {
  EventGate gate;  // holds the engine thread after the first token until the shutdown is next
  Collector c;
  auto engine = make();
  GenerationRequest r240 = request(10, 240, c);
  r240.on_event = gate.wrap(r240.on_event, 1);
  const uint64_t id = engine->submit(std::move(r240));
  c.wait_tokens(id, 1);
  gate.release();
  engine->shutdown(std::chrono::milliseconds(0));
  Collector::Result r = c.get(id);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.reason, FinishReason::kAbort);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

// With a tokenizer: the engine's streamed text, ids and finish reasons equal generate()'s for stop strings,
// EOS, seeded sampling and penalties, with every request in one batch.
TEST(EngineWithTokenizer, MatchesGenerate) {
  const std::string dir = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";
  CpuBackend ref_backend;
  std::unique_ptr<Model> ref_model = load_fixture_model("deepseek-v3-tiny-code", ref_backend);
  Tokenizer tok = Tokenizer::load(dir);
  const std::vector<std::pair<std::string, SamplingParams>> cases = tiny_code_requests();

  EngineConfig config;
  config.model_dir = dir;
  config.cpu_kv_cache_bytes = int64_t{64} << 20;
  config.kv_block_size = 16;
  config.context_chunk_size = 16;
  std::unique_ptr<Engine> engine = Engine::create(config);
  struct Got {
    std::string text;
    std::vector<int32_t> ids;
    FinishReason reason = FinishReason::kNone;
    bool done = false;
  };
  std::vector<Got> got(cases.size());
  std::mutex m;
  std::condition_variable cv;
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerationRequest r;
    r.prompt_ids = tok.encode(cases[i].first, true);
    r.sampling = cases[i].second;
    r.on_event = [&, i](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(m);
      got[i].text += e.text;
      got[i].ids.insert(got[i].ids.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finished) {
        got[i].reason = e.finish_reason;
        got[i].done = true;
        cv.notify_all();
      }
    };
    engine->submit(std::move(r));
  }
  {
    std::unique_lock<std::mutex> lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] {
      return std::all_of(got.begin(), got.end(), [](const Got& g) { return g.done; });
    }));
  }
  engine->shutdown();
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerationResult want = generate(*ref_model, tok, tok.encode(cases[i].first, true), cases[i].second);
    EXPECT_EQ(got[i].ids, want.ids) << "case " << i;
    EXPECT_EQ(got[i].text, want.text) << "case " << i;
    EXPECT_EQ(got[i].reason, want.finish_reason) << "case " << i;
  }
  EXPECT_EQ(got[1].reason, FinishReason::kStop);  // the stop-string case does stop on one
}

}  // namespace
}  // namespace dsinfer
