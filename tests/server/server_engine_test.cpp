// The HTTP server in-process over loopback with the real batched engine (Engine::create, bundled
// deepseek-v3-tiny-code on the CPU): 64 concurrent greedy streams equal their sequential runs, n > 1 with a
// seed, best_of ranking, logit_bias, echo with logprobs (the prompt scored by the model), a disconnect frees
// the engine's request, and the engine gauges reach /metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/json_recognizer.h"
#include "engine/json_schema.h"
#include "engine/json_schema_recognizer.h"
#include "engine/prompt.h"
#include "http_test_client.h"
#include "server/server.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

struct RealServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::Server> srv;
  std::thread thread;
  int port = 0;
  explicit RealServer(int64_t kv_tokens = 0) {
    server::ServeConfig config;
    config.server.port = 0;
    config.engine.model_dir = kModel;
    config.engine.device = "cpu";
    config.engine.max_batch_size = 16;
    config.engine.max_tokens_in_paged_kv_cache = kv_tokens;
    config.engine.kv_block_size = kv_tokens > 0 ? 16 : config.engine.kv_block_size;
    engine = Engine::create(config.engine);
    srv = std::make_unique<server::Server>(config);
    port = srv->listen();
    srv->set_engine(engine.get());
    srv->set_phase(server::Phase::kReady);
    thread = std::thread([this]() { srv->run(); });
  }
  ~RealServer() {
    srv->stop();
    thread.join();
    engine->shutdown(std::chrono::milliseconds(0));
    srv.reset();
    engine.reset();
  }
};

std::string stream_text(const std::string& body, std::string* finish) {
  std::string text;
  for (const std::string& p : sse_payloads(body)) {
    if (p == "[DONE]") continue;
    const json j = json::parse(p);
    for (const json& c : j["choices"]) {
      text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) *finish = c["finish_reason"];
    }
  }
  return text;
}

TEST(ServerEngineTest, ConcurrentGreedyStreamsEqualSequentialRuns) {
  RealServer s;
  constexpr int kStreams = 64;
  auto body = [](int i) {
    return json{{"prompt", "def function_" + std::to_string(i % 16) + "(x" + std::string(i / 16, 'y') + "):"},
                {"max_tokens", 8 + i % 9},
                {"temperature", 0},
                {"stream", true}}
        .dump();
  };
  std::vector<std::string> sequential(kStreams), concurrent(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    std::string finish;
    sequential[i] = stream_text(post(s.port, "/v1/completions", body(i)).body, &finish);
    ASSERT_FALSE(finish.empty());
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i]() {
      std::string finish;
      concurrent[i] = stream_text(post(s.port, "/v1/completions", body(i)).body, &finish);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(concurrent[i], sequential[i]) << "stream " << i;
}

TEST(ServerEngineTest, SeededChoicesAndLogprobs) {
  RealServer s;
  const std::string req =
      R"({"prompt": "import os\n", "max_tokens": 12, "temperature": 1.0, "seed": 7, "n": 3, "logprobs": 2})";
  const json a = json::parse(post(s.port, "/v1/completions", req).body);
  const json b = json::parse(post(s.port, "/v1/completions", req).body);
  ASSERT_EQ(a["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]);  // same seed, same output
    EXPECT_EQ(a["choices"][i]["logprobs"]["tokens"].size(),
              a["choices"][i]["logprobs"]["token_logprobs"].size());
  }
}

// best_of > n returns, per prompt, the n candidates with the highest mean logprob per token: the same
// candidates as n = best_of with the same seed (candidate i samples with seed + i), ranked by their reported
// token_logprobs; every candidate's tokens are counted in usage.
TEST(ServerEngineTest, BestOfReturnsTheCandidatesWithTheHighestMeanLogprob) {
  RealServer s;
  const std::string base = R"("prompt": "import os\n", "max_tokens": 10, "temperature": 1.0, "seed": 11)";
  const json all =
      json::parse(post(s.port, "/v1/completions", "{" + base + R"(, "n": 6, "logprobs": 0})").body);
  ASSERT_EQ(all["choices"].size(), 6u) << all.dump();
  std::vector<std::pair<double, std::string>> ranked;  // (-mean logprob, text) in candidate order
  for (const json& c : all["choices"]) {
    const json& lps = c["logprobs"]["token_logprobs"];
    ASSERT_FALSE(lps.empty());
    double sum = 0.0;
    for (const json& v : lps) sum += v.get<double>();
    ranked.emplace_back(-sum / static_cast<double>(lps.size()), c["text"].get<std::string>());
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  ASSERT_NE(ranked[0].second, ranked[5].second) << "the candidates should differ";
  for (const char* logprobs : {"", R"(, "logprobs": 1)"}) {
    const json best = json::parse(
        post(s.port, "/v1/completions", "{" + base + R"(, "n": 2, "best_of": 6)" + logprobs + "}").body);
    ASSERT_EQ(best["choices"].size(), 2u) << best.dump();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(best["choices"][i]["index"], i);
      EXPECT_EQ(best["choices"][i]["text"], ranked[static_cast<size_t>(i)].second) << "rank " << i;
      EXPECT_EQ(best["choices"][i]["logprobs"].is_null(), std::string(logprobs).empty());
    }
    EXPECT_EQ(best["usage"]["completion_tokens"], all["usage"]["completion_tokens"]);
  }
}

// echo with logprobs scores the prompt with the model: the scores of a prompt that ends with the engine's own
// greedy tokens equal the logprobs the engine reported while generating them (decode steps against one
// prefill), the first token's entry is null, and max_tokens 0 (the prompt alone) gives the same entries as a
// request that also generates.
TEST(ServerEngineTest, EchoWithLogprobsScoresThePromptWithTheModel) {
  RealServer s;
  const Tokenizer& tok = s.engine->tokenizer();
  const std::vector<int32_t> prompt = encode_text_prompt(tok, "def add(a, b):\n    return");
  // Greedy tokens and their logprobs from the engine itself.
  std::mutex mutex;
  std::condition_variable done;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  bool finished = false;
  GenerationRequest g;
  g.prompt_ids = prompt;
  g.sampling.temperature = 0.0f;
  g.sampling.ignore_eos = true;
  g.sampling.max_tokens = 6;
  g.sampling.logprobs = 1;
  g.on_event = [&](const RequestEvent& e) {
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
    for (const TokenLogprob& lp : e.logprobs) logprobs.push_back(lp.logprob);
    if (e.finished) finished = true;
    done.notify_all();
  };
  s.engine->submit(std::move(g));
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, 60s, [&] { return finished; }));
  }
  ASSERT_EQ(ids.size(), 6u);
  std::vector<int32_t> scored = prompt;
  scored.insert(scored.end(), ids.begin(), ids.end());
  const json body = {{"prompt", scored}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
  const json a = json::parse(post(s.port, "/v1/completions", body.dump()).body);
  ASSERT_TRUE(a.contains("choices")) << a.dump();
  const json& lp = a["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), scored.size()) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(a["usage"]["completion_tokens"], 0);
  EXPECT_EQ(a["usage"]["prompt_tokens"], scored.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t at = prompt.size() + i;
    EXPECT_NEAR(lp["token_logprobs"][at].get<double>(), logprobs[i], 1e-4) << "generated token " << i;
    // A greedy token is its position's most likely one: its own top-1 entry.
    ASSERT_EQ(lp["top_logprobs"][at].size(), 1u);
    EXPECT_NEAR(lp["top_logprobs"][at].begin().value().get<double>(), logprobs[i], 1e-4);
  }
  for (size_t i = 1; i < prompt.size(); ++i) EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  // The same prompt with generation: the same prompt entries, then the generated ones.
  json generating = body;
  generating["max_tokens"] = 3;
  generating["temperature"] = 0;
  const json b = json::parse(post(s.port, "/v1/completions", generating.dump()).body);
  const json& lpb = b["choices"][0]["logprobs"];
  ASSERT_EQ(lpb["token_logprobs"].size(), scored.size() + 3) << lpb.dump();
  for (size_t i = 1; i < scored.size(); ++i)
    EXPECT_NEAR(lpb["token_logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-5) << i;
  EXPECT_EQ(b["usage"]["completion_tokens"], 3);
  // Several sampled candidates (the prompt scored once, by the first): every choice carries the same entries.
  json several = body;
  several["max_tokens"] = 2;
  several["n"] = 3;
  several["seed"] = 5;
  const json c = json::parse(post(s.port, "/v1/completions", several.dump()).body);
  ASSERT_EQ(c["choices"].size(), 3u) << c.dump();
  for (const json& choice : c["choices"]) {
    const json& lpc = choice["logprobs"];
    ASSERT_EQ(lpc["token_logprobs"].size(), scored.size() + 2) << lpc.dump();
    EXPECT_TRUE(lpc["token_logprobs"][0].is_null());
    for (size_t i = 1; i < scored.size(); ++i)
      EXPECT_NEAR(lpc["token_logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-5) << i;
  }
}

TEST(ServerEngineTest, LogitBiasSteersTheEngine) {
  RealServer s;
  const std::string base = R"("prompt": "import os\n", "max_tokens": 8, "temperature": 0, "logprobs": 1)";
  const json plain = json::parse(post(s.port, "/v1/completions", "{" + base + "}").body);
  const json& lp = plain["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  // Banning the first greedy token changes the answer; forcing one token makes it the whole answer, while the
  // reported logprobs stay the model's own.
  const json ids = json::parse(
      post(s.port, "/tokenize", json{{"prompt", lp["tokens"][0]}, {"add_special_tokens", false}}.dump())
          .body);
  ASSERT_EQ(ids["tokens"].size(), 1u);
  const int first_id = ids["tokens"][0];
  const json banned =
      json::parse(post(s.port, "/v1/completions",
                       "{" + base + R"(, "logit_bias": {")" + std::to_string(first_id) + R"(": -100}})")
                      .body);
  EXPECT_NE(banned["choices"][0]["logprobs"]["tokens"][0], lp["tokens"][0]);
  const json forced =
      json::parse(post(s.port, "/v1/completions", "{" + base + R"(, "logit_bias": {"300": 100}})").body);
  const std::string token300 =
      json::parse(post(s.port, "/detokenize", R"({"tokens": [300]})").body)["prompt"].get<std::string>();
  std::string all300;
  for (int i = 0; i < 8; ++i) all300 += token300;
  EXPECT_EQ(forced["choices"][0]["text"], all300);
  EXPECT_LT(forced["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(), 0.0);
}

TEST(ServerEngineTest, JsonObjectAnswersAreJson) {
  RealServer s;
  int complete = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                 {"max_tokens", 48},
                 {"seed", seed},
                 {"response_format", {{"type", "json_object"}}}};
    const json whole = json::parse(post(s.port, "/v1/chat/completions", body.dump()).body);
    const std::string text = whole["choices"][0]["message"]["content"];
    // Every answer is a prefix of a JSON object; one that ended by itself is a whole object.
    JsonRecognizer r;
    EXPECT_TRUE(r.feed(text)) << text;
    if (whole["choices"][0]["finish_reason"] == "stop") {
      ++complete;
      EXPECT_TRUE(r.complete()) << text;
      EXPECT_TRUE(json::parse(text).is_object()) << text;
    }
    // Streamed: the same answer.
    body["stream"] = true;
    std::string streamed;
    for (const std::string& p : sse_payloads(post(s.port, "/v1/chat/completions", body.dump()).body)) {
      if (p == "[DONE]") continue;
      const json chunk = json::parse(p);
      streamed += chunk["choices"][0]["delta"].value("content", "");
    }
    EXPECT_EQ(streamed, text);
  }
  EXPECT_GT(complete, 0);  // the tiny model does close objects within 48 tokens
}

// response_format json_schema through the real engine: every answer is a prefix the schema allows (the keys
// in the schema's declared order, not alphabetical), one that ended by itself validates, streamed = whole.
TEST(ServerEngineTest, JsonSchemaAnswersFollowTheSchema) {
  RealServer s;
  const std::string schema = R"({"type": "object", "properties": {"pair": {"type": "array", "prefixItems":
      [{"type": "integer"}, {"type": "boolean"}], "minItems": 2, "maxItems": 2}, "size": {"type": "integer"},
      "kind": {"enum": ["small", "large", null]}, "tags": {"type": "array", "items": {"type": "boolean"},
      "maxItems": 2}}, "required": ["pair", "size", "kind", "tags"],
      "additionalProperties": false})";
  const auto compiled = JsonSchema::compile(nlohmann::ordered_json::parse(schema));
  int complete = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    const std::string body = R"({"messages": [{"role": "user", "content": "Describe it."}], "max_tokens": 200,
        "seed": )" + std::to_string(seed) +
                             R"(, "response_format": {"type": "json_schema", "json_schema":
        {"name": "thing", "strict": true, "schema": )" +
                             schema + "}}";
    const json whole = json::parse(post(s.port, "/v1/chat/completions", body + "}").body);
    ASSERT_TRUE(whole.contains("choices")) << whole.dump();
    const std::string text = whole["choices"][0]["message"]["content"];
    JsonSchemaRecognizer r(compiled.get());
    EXPECT_TRUE(r.feed(text)) << text;
    if (whole["choices"][0]["finish_reason"] == "stop") {
      ++complete;
      EXPECT_TRUE(r.complete()) << text;
      const nlohmann::ordered_json answer = nlohmann::ordered_json::parse(text);
      std::vector<std::string> keys;
      for (const auto& [k, v] : answer.items()) keys.push_back(k);
      EXPECT_EQ(keys, (std::vector<std::string>{"pair", "size", "kind", "tags"})) << text;
      EXPECT_TRUE(answer["size"].is_number_integer()) << text;
      EXPECT_LE(answer["tags"].size(), 2u) << text;
      // A tuple (pydantic's tuple[int, bool]): its items' types in order.
      ASSERT_EQ(answer["pair"].size(), 2u) << text;
      EXPECT_TRUE(answer["pair"][0].is_number_integer() && answer["pair"][1].is_boolean()) << text;
    }
    std::string streamed;
    for (const std::string& p :
         sse_payloads(post(s.port, "/v1/chat/completions", body + R"(, "stream": true})").body)) {
      if (p == "[DONE]") continue;
      streamed += json::parse(p)["choices"][0]["delta"].value("content", "");
    }
    EXPECT_EQ(streamed, text);
  }
  EXPECT_GT(complete, 0);
  // Any top-level type, on text completions too.
  const json array = json::parse(post(s.port, "/v1/completions", R"({"prompt": "x = ", "max_tokens": 40,
      "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "list",
      "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}}}})")
                                     .body);
  const std::string list = array["choices"][0]["text"];
  EXPECT_EQ(list.find_first_not_of(" \t\r\n"), list.find('[')) << list;  // whitespace may come first
  if (array["choices"][0]["finish_reason"] == "stop") {
    const json parsed = json::parse(list);
    EXPECT_TRUE(parsed.is_array() && !parsed.empty() && parsed.size() <= 3) << list;
  }
}

TEST(ServerEngineTest, DisconnectFreesTheEngineRequest) {
  RealServer s;
  {
    RawConnection c(s.port);
    c.send_all(
        http_request_text("POST", "/v1/completions",
                          R"({"prompt": "x", "max_tokens": 2000, "ignore_eos": true, "stream": true})"));
    std::string got;
    while (got.find("data: ") == std::string::npos) got += c.recv_some();
    c.reset();
  }
  const auto end = std::chrono::steady_clock::now() + 5s;
  EngineStats st = s.engine->stats();
  while ((st.running > 0 || st.waiting > 0) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(5ms);
    st = s.engine->stats();
  }
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  const HttpResult m = get(s.port, "/metrics");
  EXPECT_NE(m.body.find("dsinfer_num_requests_running 0"), std::string::npos);
  EXPECT_NE(m.body.find("dsinfer_kv_blocks_total "), std::string::npos);
  EXPECT_EQ(m.body.find("dsinfer_kv_blocks_total 0\n"), std::string::npos) << m.body;
}

// A KV cache smaller than the model's context (2048) bounds what a request may ask for: the server advertises
// and enforces the cache's 1024 tokens with a 400 before any work, instead of failing the request halfway.
TEST(ServerEngineTest, ContextIsBoundedByTheKvCache) {
  RealServer s(1024);
  const json models = json::parse(get(s.port, "/v1/models").body);
  EXPECT_EQ(models["data"][0]["max_model_len"], 1024);
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "x = 1\n";
  const json too_long = {{"prompt", prompt}, {"max_tokens", 1200}, {"ignore_eos", true}};
  const HttpResult r = post(s.port, "/v1/completions", too_long.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "context_length_exceeded") << r.body;
  const json fits = {{"prompt", prompt}, {"max_tokens", 200}, {"ignore_eos", true}};
  const HttpResult ok = post(s.port, "/v1/completions", fits.dump());
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["usage"]["completion_tokens"], 200);
}

}  // namespace
}  // namespace dsinfer::testing
