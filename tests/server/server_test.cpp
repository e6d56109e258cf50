// In-process tests of the HTTP server over loopback with a FakeEngine: every endpoint, streaming and not,
// every bad-input class, auth, disconnect-cancels, 429 under a flood, timeouts, drain, metrics, and 64
// concurrent streams equal to their sequential runs.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/prompt.h"
#include "expect_error.h"
#include "http_test_client.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::vector<int32_t> text_ids(const FakeEngine& e, const std::string& text) {
  return encode_text_prompt(e.tokenizer(), text);
}

// Concatenated text per choice index of an SSE completion stream, plus the final chunk's data.
struct StreamResult {
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  json usage;
  bool done = false;
  bool role_first = true;
  size_t chunks = 0;
};

StreamResult parse_stream(const std::string& body, bool chat) {
  StreamResult s;
  std::set<int> seen;
  for (const std::string& p : sse_payloads(body)) {
    if (p == "[DONE]") {
      s.done = true;
      continue;
    }
    json j = json::parse(p);
    ++s.chunks;
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    for (const json& c : j["choices"]) {
      const int idx = c["index"];
      if (chat) {
        if (!seen.count(idx) && !c["delta"].contains("role")) s.role_first = false;
        if (c["delta"].contains("content")) s.text[idx] += c["delta"]["content"].get<std::string>();
      } else {
        s.text[idx] += c["text"].get<std::string>();
      }
      seen.insert(idx);
      if (!c["finish_reason"].is_null()) s.finish[idx] = c["finish_reason"];
    }
  }
  return s;
}

TEST(ServerTest, HealthLiveAndReady) {
  ServerHarness h({}, {}, /*ready=*/false);
  EXPECT_EQ(get(h.port, "/health/live").status, 200);
  HttpResult r = get(h.port, "/health/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(json::parse(r.body)["reason"].get<std::string>(), "");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "hi"})"), 503);
  h.srv->set_engine(h.engine.get());
  h.srv->set_phase(server::Phase::kReady);
  EXPECT_EQ(get(h.port, "/health/ready").status, 200);
}

TEST(ServerTest, Models) {
  ServerHarness h([](server::ServeConfig& c) { c.server.served_model_name = "my-model"; });
  json j = json::parse(get(h.port, "/v1/models").body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "my-model");
  EXPECT_EQ(j["data"][0]["object"], "model");
  expect_error(post(h.port, "/v1/completions", R"({"model": "deepseek-v3-tiny-code", "prompt": "hi"})"), 404,
               "model", "model_not_found");
  EXPECT_EQ(post(h.port, "/v1/completions", R"({"model": "my-model", "prompt": "hi"})").status, 200);
  // One model by name (the openai clients' models.retrieve), percent-escapes decoded.
  HttpResult one = get(h.port, "/v1/models/my-model");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body), j["data"][0]);
  EXPECT_EQ(get(h.port, "/v1/models/my%2Dmodel").status, 200);
  expect_error(get(h.port, "/v1/models/other"), 404, "model", "model_not_found");
  expect_error(get(h.port, "/v1/models/my-model/x"), 404, "model", "model_not_found");
  expect_error(post(h.port, "/v1/models/my-model", "{}"), 405, "", "method_not_allowed");
  expect_error(get(h.port, "/v1/model"), 404, "", "not_found");
}

TEST(ServerTest, CompletionNonStreaming) {
  ServerHarness h;
  HttpResult r = post(h.port, "/v1/completions", R"({"prompt": "Hello there", "max_tokens": 7, "seed": 5})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "deepseek-v3-tiny-code");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  const auto ids = text_ids(*h.engine, "Hello there");
  EXPECT_EQ(j["choices"][0]["text"], h.engine->expected_text(ids, 5, 7));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["usage"]["total_tokens"], ids.size() + 7);
  // Default max_tokens of completions is 16.
  j = json::parse(post(h.port, "/v1/completions", R"({"prompt": "Hello"})").body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
}

TEST(ServerTest, PromptFormsAndN) {
  ServerHarness h;
  const auto a = text_ids(*h.engine, "first");
  const auto b = text_ids(*h.engine, "second");
  json j = json::parse(
      post(h.port, "/v1/completions", R"({"prompt": ["first", "second"], "max_tokens": 4, "seed": 1})").body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], h.engine->expected_text(a, 1, 4));
  EXPECT_EQ(j["choices"][1]["text"], h.engine->expected_text(b, 1, 4));
  EXPECT_EQ(j["usage"]["prompt_tokens"], a.size() + b.size());

  json ids_body = {{"prompt", a}, {"max_tokens", 3}, {"seed", 2}};
  j = json::parse(post(h.port, "/v1/completions", ids_body.dump()).body);
  EXPECT_EQ(j["choices"][0]["text"], h.engine->expected_text(a, 2, 3));

  json lists_body = {{"prompt", {a, b}}, {"max_tokens", 3}, {"seed", 2}};
  j = json::parse(post(h.port, "/v1/completions", lists_body.dump()).body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["text"], h.engine->expected_text(b, 2, 3));

  // n > 1: seeds derived from the request seed, choices merged by index.
  j = json::parse(
      post(h.port, "/v1/completions", R"({"prompt": "first", "max_tokens": 5, "seed": 10, "n": 3})").body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], h.engine->expected_text(a, 10 + i, 5));
  }
  EXPECT_NE(j["choices"][0]["text"], j["choices"][1]["text"]);
  EXPECT_EQ(j["usage"]["completion_tokens"], 15);
  EXPECT_EQ(j["usage"]["prompt_tokens"], a.size());
}

TEST(ServerTest, ChatNonStreaming) {
  ServerHarness h;
  json body = {
      {"model", "deepseek-v3-tiny-code"},
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
      {"max_completion_tokens", 6},
      {"seed", 3},
      {"user", "someone"}};
  HttpResult r = post(h.port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  const auto ids = encode_chat_prompt(h.engine->tokenizer(), body["messages"], true);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], h.engine->expected_text(ids, 3, 6));
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  // Content parts are flattened to text.
  json parts = body;
  parts["messages"][1]["content"] = json::array({{{"type", "text"}, {"text", "Hi"}}});
  EXPECT_EQ(json::parse(
                post(h.port, "/v1/chat/completions", parts.dump()).body)["choices"][0]["message"]["content"],
            j["choices"][0]["message"]["content"]);
}

TEST(ServerTest, CompletionStreamingMatchesNonStreaming) {
  ServerHarness h;
  const std::string base = R"("prompt": "stream me", "max_tokens": 9, "seed": 4, "n": 2)";
  json whole = json::parse(post(h.port, "/v1/completions", "{" + base + "}").body);
  HttpResult r = post(h.port, "/v1/completions",
                      "{" + base + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  StreamResult s = parse_stream(r.body, false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(sse_payloads(r.body).back(), "[DONE]");
  EXPECT_EQ(s.text[0], whole["choices"][0]["text"]);
  EXPECT_EQ(s.text[1], whole["choices"][1]["text"]);
  EXPECT_EQ(s.finish[0], "length");
  EXPECT_EQ(s.finish[1], "length");
  EXPECT_EQ(s.usage["completion_tokens"], 18);
  EXPECT_GT(s.chunks, 9u);
  // Without include_usage there is no usage chunk.
  s = parse_stream(post(h.port, "/v1/completions", "{" + base + R"(, "stream": true})").body, false);
  EXPECT_TRUE(s.usage.is_null());
  EXPECT_TRUE(s.done);
}

TEST(ServerTest, ChatStreaming) {
  ServerHarness h;
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me"}}}},
               {"max_tokens", 5},
               {"seed", 8},
               {"stream", true}};
  HttpResult r = post(h.port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  StreamResult s = parse_stream(r.body, true);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.role_first);
  const auto ids = encode_chat_prompt(h.engine->tokenizer(), body["messages"], true);
  EXPECT_EQ(s.text[0], h.engine->expected_text(ids, 8, 5));
  EXPECT_EQ(s.finish[0], "length");
  const json first = json::parse(sse_payloads(r.body)[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST(ServerTest, Logprobs) {
  ServerHarness h;
  json j = json::parse(
      post(h.port, "/v1/completions", R"({"prompt": "x y", "max_tokens": 3, "logprobs": 2})").body);
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_LE(lp["top_logprobs"][0].size(), 2u);
  j = json::parse(
      post(
          h.port, "/v1/chat/completions",
          R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 2, "logprobs": true, "top_logprobs": 3})")
          .body);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

TEST(ServerTest, StopString) {
  ServerHarness h;
  json j = json::parse(
      post(h.port, "/v1/completions", R"({"prompt": "stop test", "max_tokens": 12, "seed": 9})").body);
  const std::string full = j["choices"][0]["text"];
  // Stop at the third word of the unstopped output.
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) pos = full.find(' ', pos + 1);
  ASSERT_NE(pos, std::string::npos);
  const std::string word = full.substr(pos, full.find(' ', pos + 1) - pos);
  json body = {{"prompt", "stop test"}, {"max_tokens", 12}, {"seed", 9}, {"stop", word}};
  j = json::parse(post(h.port, "/v1/completions", body.dump()).body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().find(word), std::string::npos);
  EXPECT_EQ(full.rfind(j["choices"][0]["text"].get<std::string>(), 0), 0u);
}

TEST(ServerTest, TokenizeDetokenize) {
  ServerHarness h;
  HttpResult r = post(h.port, "/tokenize", R"({"prompt": "def f(x): return x"})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const auto ids = text_ids(*h.engine, "def f(x): return x");
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(j["count"], ids.size());
  EXPECT_EQ(j["max_model_len"], 2048);
  json d = json::parse(post(h.port, "/detokenize", json{{"tokens", j["tokens"]}}.dump()).body);
  EXPECT_EQ(d["prompt"], h.engine->tokenizer().decode(ids));
  j = json::parse(post(h.port, "/tokenize", R"({"messages": [{"role": "user", "content": "hey"}]})").body);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(),
            encode_chat_prompt(h.engine->tokenizer(), json::parse(R"([{"role": "user", "content": "hey"}])"),
                               true));
  // OpenAI's "developer" role renders as "system" (the templates know only that name).
  j = json::parse(
      post(
          h.port, "/tokenize",
          R"({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hey"}]})")
          .body);
  EXPECT_EQ(
      j["tokens"].get<std::vector<int32_t>>(),
      encode_chat_prompt(
          h.engine->tokenizer(),
          json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hey"}])"),
          true));
  expect_error(post(h.port, "/tokenize", R"({})"), 400, "prompt");
  expect_error(post(h.port, "/detokenize", R"({"tokens": [1, "a"]})"), 400, "tokens");
  expect_error(post(h.port, "/detokenize", R"({"tokens": [99999999]})"), 400, "tokens");
}

TEST(ServerTest, BadInputClasses) {
  ServerHarness h([](server::ServeConfig& c) { c.server.max_body_bytes = 64 * 1024; });
  const int p = h.port;
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", )"), 400, "", "invalid_json");
  expect_error(post(p, "/v1/completions", ""), 400);
  expect_error(post(p, "/v1/completions", R"([1, 2])"), 400);
  expect_error(post(p, "/v1/completions", "{\"prompt\": \"a\xff\xfe b\"}"), 400, "", "invalid_utf8");
  expect_error(post(p, "/v1/completions", R"({"prompt": "a \ud800 b"})"), 400);
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "temperature": "hot"})"), 400, "temperature",
               "invalid_type");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "max_tokens": "5"})"), 400, "max_tokens",
               "invalid_type");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "stream": "yes"})"), 400, "stream");
  expect_error(post(p, "/v1/completions", R"({"prompt": 5})"), 400, "prompt");
  expect_error(post(p, "/v1/completions", R"({"prompt": [1, -4]})"), 400, "prompt");
  expect_error(post(p, "/v1/completions", R"({"max_tokens": 5})"), 400, "prompt",
               "missing_required_parameter");
  expect_error(post(p, "/v1/chat/completions", R"({"prompt": "x"})"), 400, "messages",
               "missing_required_parameter");
  expect_error(post(p, "/v1/chat/completions", R"({"messages": [{"content": "x"}]})"), 400, "messages");
  expect_error(post(p, "/v1/chat/completions", R"({"messages": []})"), 400, "messages");
  expect_error(post(p, "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})"), 400,
               "messages", "invalid_value");  // a role the template would drop
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "temperature": 1e999})"), 400, "",
               "invalid_json");
  // Features not implemented, asked for with values that would change the answer: refused, never ignored.
  const char* kUnsupported = "unsupported_parameter";
  // echo and suffix: completion_options_test.cpp.
  // best_of (ranked by the engine's logprobs: server_engine_test.cpp): at least n, not streamed, bounded.
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "best_of": 1, "n": 2})"), 400, "best_of",
               "invalid_value");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "best_of": 3, "stream": true})"), 400, "best_of",
               "invalid_value");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "best_of": 129})"), 400, "best_of",
               "invalid_value");
  expect_error(post(p, "/v1/completions", R"({"prompt": ["x", "y", "z"], "best_of": 64})"), 400, "best_of",
               "invalid_value");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "best_of": "3"})"), 400, "best_of",
               "invalid_type");
  {
    const HttpResult r =
        post(p, "/v1/completions", R"({"prompt": ["x", "y"], "max_tokens": 2, "best_of": 3})");
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    ASSERT_EQ(j["choices"].size(), 2u);  // one per prompt, indexed as without best_of
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_EQ(j["choices"][1]["index"], 1);
    EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());  // collected to rank, not asked for
    EXPECT_EQ(j["usage"]["completion_tokens"], 12);      // every candidate's tokens: 2 prompts x 3 x 2
  }
  // logit_bias: token ids of the vocabulary (4096 here) as keys, biases in [-100, 100].
  for (const char* bad : {R"({"x": 1})", R"({"4096": 1})", R"({"-1": 1})", R"({"5": 100.5})",
                          R"({"5": -101})", R"({"05": 1, "5": 2})"}) {
    expect_error(post(p, "/v1/completions", std::string(R"({"prompt": "x", "logit_bias": )") + bad + "}"),
                 400, "logit_bias", "invalid_value");
  }
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "logit_bias": {"5": "up"}})"), 400, "logit_bias",
               "invalid_type");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "logit_bias": [1]})"), 400, "logit_bias",
               "invalid_type");
  const std::string hi = R"("messages": [{"role": "user", "content": "hi"}], "max_tokens": 2)";
  // json_schema (served: server_engine_test.cpp): the envelope checked, unenforceable schemas refused with
  // the keyword and its location.
  expect_error(
      post(p, "/v1/chat/completions",
           "{" + hi + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})"),
      400, "response_format.json_schema.schema", "invalid_type");
  expect_error(post(p, "/v1/chat/completions",
                    "{" + hi + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "a b",
                    "schema": {}}}})"),
               400, "response_format.json_schema.name", "invalid_value");
  const HttpResult pattern = post(p, "/v1/chat/completions", "{" + hi + R"(, "response_format": {"type":
      "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"qty": {"type":
      "number", "multipleOf": 5}}}}}})");
  expect_error(pattern, 400, "response_format.json_schema.schema", "invalid_value");
  EXPECT_NE(pattern.body.find("at #/properties/qty: 'multipleOf' is not supported"), std::string::npos)
      << pattern.body;
  expect_error(post(p, "/v1/chat/completions", "{" + hi + R"(, "response_format": {"type": "xml"}})"), 400,
               "response_format", kUnsupported);
  // A content part whose type is not a string (was a 500: read as a string).
  expect_error(post(p, "/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": [{"type": -1, "text": "x"}]}]})"),
               400, "messages", "invalid_value");
  expect_error(post(p, "/v1/chat/completions",
                    "{" + hi + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                    "schema": {"type": "string"}}}, "ignore_eos": true})"),
               400, "response_format", "invalid_value");
  // json_object (served: server_engine_test.cpp) excludes tools and ignore_eos.
  expect_error(post(p, "/v1/chat/completions",
                    "{" + hi + R"(, "response_format": {"type": "json_object"}, "ignore_eos": true})"),
               400, "response_format", "invalid_value");
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  // Tools are served (tool_calls_test.cpp); malformed ones are refused naming the field.
  expect_error(post(p, "/v1/chat/completions", "{" + hi + R"(, "tools": [{"type": "function"}]})"), 400,
               "tools", "invalid_value");
  expect_error(post(p, "/v1/chat/completions", "{" + hi + ", " + tools + R"(, "tool_choice": "always"})"),
               400, "tool_choice", "invalid_value");
  expect_error(post(p, "/v1/chat/completions", "{" + hi + R"(, "functions": [{"name": "f"}]})"), 400,
               "functions", kUnsupported);
  // vLLM's prompt_logprobs (completions answer echo + logprobs instead).
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "prompt_logprobs": 1})"), 400, "prompt_logprobs",
               kUnsupported);
  expect_error(post(p, "/v1/chat/completions", "{" + hi + R"(, "prompt_logprobs": 0})"), 400,
               "prompt_logprobs", kUnsupported);
  // Their neutral values change nothing and pass.
  EXPECT_EQ(post(p, "/v1/completions",
                 R"({"prompt": "x", "max_tokens": 2, "echo": false, "suffix": "", "best_of": 2, "n": 2,
                     "logit_bias": {}, "prompt_logprobs": null})")
                .status,
            200);
  EXPECT_EQ(post(p, "/v1/chat/completions",
                 "{" + hi + ", " + tools + R"(, "tool_choice": "none", "response_format": {"type": "text"}})")
                .status,
            200);
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "model": "gpt-4"})"), 404, "model",
               "model_not_found");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "max_tokens": -3})"), 400, "max_tokens");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "max_tokens": 0})"), 400, "max_tokens");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "max_tokens": 100000000000})"), 400,
               "max_tokens", "context_length_exceeded");
  expect_error(post(p, "/v1/completions", R"({"prompt": "hello world", "max_tokens": 2045})"), 400,
               "max_tokens", "context_length_exceeded");
  expect_error(post(p, "/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000})"),
               400, "max_tokens", "context_length_exceeded");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "top_p": 0})"), 400, "top_p");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "temperature": -1})"), 400, "temperature");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "presence_penalty": 3})"), 400,
               "presence_penalty");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "n": 0})"), 400, "n");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "logprobs": 50})"), 400, "logprobs");
  expect_error(post(p, "/v1/completions", R"({"prompt": "x", "stop": [1]})"), 400, "stop");
  // A prompt that fills the whole context leaves no room to generate.
  json long_prompt = {{"prompt", std::vector<int32_t>(2048, 5)}};
  expect_error(post(p, "/v1/completions", long_prompt.dump()), 400);
  // Oversized body.
  HttpResult big = post(p, "/v1/completions", "{\"prompt\": \"" + std::string(100000, 'a') + "\"}");
  expect_error(big, 413, "", "request_too_large");
  // Unknown route and wrong method.
  expect_error(get(p, "/v1/nothing"), 404);
  expect_error(post(p, "/v2/completions", "{}"), 404);
  HttpResult m = get(p, "/v1/completions");
  expect_error(m, 405, "", "method_not_allowed");
  EXPECT_EQ(m.headers["allow"], "POST");
  expect_error(post(p, "/v1/models", "{}"), 405);
  // The server still works after all that.
  EXPECT_EQ(post(p, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

TEST(ServerTest, ExpectContinue) {
  ServerHarness h;
  const std::string body = R"({"prompt": "continue", "max_tokens": 2})";
  RawConnection c(h.port);
  c.send_all(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nExpect: "
      "100-continue\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n");
  EXPECT_EQ(c.recv_some(2000ms), "HTTP/1.1 100 Continue\r\n\r\n");
  c.send_all(body);
  EXPECT_EQ(c.read_response().status, 200);
}

TEST(ServerTest, ApiKey) {
  ServerHarness h([](server::ServeConfig& c) { c.server.api_key = "sekret"; });
  expect_error(get(h.port, "/v1/models"), 401, "", "invalid_api_key");
  expect_error(get(h.port, "/v1/models", {"Authorization: Bearer wrong"}), 401, "", "invalid_api_key");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x"})", {"Authorization: Bearer sekre"}), 401);
  EXPECT_EQ(get(h.port, "/v1/models", {"Authorization: Bearer sekret"}).status, 200);
  EXPECT_EQ(
      post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", {"Authorization: Bearer sekret"})
          .status,
      200);
  EXPECT_EQ(get(h.port, "/health/live").status, 200);
  EXPECT_EQ(get(h.port, "/health/ready").status, 200);
  EXPECT_EQ(get(h.port, "/metrics").status, 200);
}

TEST(ServerTest, StreamingDisconnectCancels) {
  FakeEngine::Options opts;
  opts.token_delay = 10ms;
  ServerHarness h({}, opts);
  {
    RawConnection c(h.port);
    c.send_all(http_request_text("POST", "/v1/completions",
                                 R"({"prompt": "long", "max_tokens": 2000, "stream": true})"));
    std::string got;
    while (got.find("data: ") == std::string::npos) got += c.recv_some();
    EXPECT_EQ(h.engine->cancel_count(), 0u);
    c.reset();
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_for([&]() { return h.engine->cancel_count() == 1; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 0; }));
  // A non-streaming request whose client goes away (orderly close) is cancelled too.
  {
    RawConnection c(h.port);
    c.send_all(
        http_request_text("POST", "/v1/completions", R"({"prompt": "long", "max_tokens": 2000, "n": 2})"));
    EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 2; }));
    c.close();
  }
  EXPECT_TRUE(wait_for([&]() { return h.engine->cancel_count() == 3; }));
  EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 0; }));
  EXPECT_TRUE(wait_for([&]() {
    return h.srv->registry().value("dsinfer_requests_total", {{"status", "499"}}) == 2;
  }));
}

TEST(ServerTest, QueueFloodGets429WithRetryAfter) {
  ServerHarness h([](server::ServeConfig& c) { c.engine.max_queue_length = 4; });
  h.engine->set_paused(true);
  constexpr int kClients = 12;
  std::vector<HttpResult> results(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i]() {
      results[i] = post(h.port, "/v1/completions", R"({"prompt": "flood", "max_tokens": 2})");
    });
  }
  EXPECT_TRUE(wait_for([&]() {
    int rejected = 0;
    for (const auto& r : results) rejected += r.status == 429;
    return rejected == kClients - 4;
  }));
  EXPECT_EQ(h.engine->submitted(), 4u);
  h.engine->set_paused(false);
  for (auto& t : threads) t.join();
  int ok = 0, limited = 0;
  for (const auto& r : results) {
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++limited;
      EXPECT_EQ(r.headers.at("retry-after"), "1");
      expect_error(r, 429, "", "rate_limit_exceeded");
    }
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(limited, kClients - 4);
}

TEST(ServerTest, SlowAndIdleConnectionsTimeOut) {
  ServerHarness h([](server::ServeConfig& c) { c.server.idle_timeout_seconds = 0.3; });
  RawConnection slow(h.port);
  slow.send_all("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n");
  RawConnection idle(h.port);
  EXPECT_TRUE(slow.closed_by_peer(3000ms));
  EXPECT_TRUE(idle.closed_by_peer(3000ms));
  // A keep-alive connection serves several requests, then is closed when idle.
  RawConnection ka(h.port);
  for (int i = 0; i < 3; ++i) {
    ka.send_all(http_request_text("GET", "/health/live", ""));
    EXPECT_EQ(ka.read_response().status, 200);
  }
  EXPECT_TRUE(ka.closed_by_peer(3000ms));
}

TEST(ServerTest, RequestTimeoutCancels) {
  ServerHarness h([](server::ServeConfig& c) { c.server.request_timeout_seconds = 0.2; });
  h.engine->set_paused(true);
  HttpResult r = post(h.port, "/v1/completions", R"({"prompt": "slow", "max_tokens": 2})");
  expect_error(r, 504, "", "request_timeout");
  EXPECT_EQ(h.engine->cancel_count(), 1u);
}

TEST(ServerTest, ConcurrentStreamsEqualSequentialRuns) {
  FakeEngine::Options opts;
  opts.token_delay = 2ms;
  ServerHarness h({}, opts);
  constexpr int kStreams = 64;
  auto body = [](int i) {
    return json{{"prompt", "request number " + std::to_string(i)},
                {"max_tokens", 12 + i % 5},
                {"seed", i},
                {"stream", true}}
        .dump();
  };
  std::vector<std::string> sequential(kStreams), concurrent(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    StreamResult s = parse_stream(post(h.port, "/v1/completions", body(i)).body, false);
    ASSERT_TRUE(s.done);
    sequential[i] = s.text[0];
  }
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i]() {
      StreamResult s = parse_stream(post(h.port, "/v1/completions", body(i)).body, false);
      if (s.done) ++done;
      concurrent[i] = s.text[0];
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kStreams);
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(concurrent[i], sequential[i]) << "stream " << i;
}

TEST(ServerTest, Metrics) {
  ServerHarness h;
  ASSERT_EQ(post(h.port, "/v1/completions", R"({"prompt": "m", "max_tokens": 4})").status, 200);
  ASSERT_EQ(post(h.port, "/v1/completions", R"({"prompt": "m", "max_tokens": -1})").status, 400);
  HttpResult r = get(h.port, "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.headers["content-type"].find("text/plain"), std::string::npos);
  for (const char* name : {"dsinfer_requests_total{status=\"200\"} 1",
                           "dsinfer_requests_total{status=\"400\"} 1",
                           "dsinfer_prompt_tokens_total",
                           "dsinfer_generation_tokens_total 4",
                           "dsinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
                           "dsinfer_time_per_output_token_seconds_count 1",
                           "dsinfer_e2e_request_latency_seconds_sum",
                           "dsinfer_scheduler_queue_delay_seconds_count 1",
                           "dsinfer_num_requests_running 0",
                           "dsinfer_num_requests_waiting 0",
                           "dsinfer_kv_cache_usage_ratio 0",
                           "dsinfer_kv_blocks_total 100",
                           "dsinfer_kv_blocks_used 0",
                           "dsinfer_kv_blocks_cached 3",
                           "dsinfer_gpu_memory_fragmentation_ratio 0.25",
                           "dsinfer_preemptions_total 2",
                           "dsinfer_cuda_graph_replays_total 7",
                           "dsinfer_cuda_graph_capture_failures_total 1",
                           "dsinfer_cuda_graph_captures_total 5",
                           "dsinfer_cuda_graph_capture_seconds_total 0.25",
                           "dsinfer_long_tail_requests_total 0",
                           "# TYPE dsinfer_e2e_request_latency_seconds histogram",
                           "# TYPE dsinfer_requests_total counter",
                           "# TYPE dsinfer_num_requests_running gauge"}) {
    EXPECT_NE(r.body.find(name), std::string::npos) << name << "\n" << r.body;
  }
  // The same registry is readable in-process (benchmarks).
  EXPECT_EQ(h.srv->registry().value("dsinfer_generation_tokens_total"), 4.0);
}

TEST(ServerMetricsTest, LongTailCountsRequestsSlowerThanThreeTimesTheMean) {
  server::MetricsRegistry registry;
  server::ServerMetrics m(registry);
  server::RequestTimings t;
  t.e2e = 0.1;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(m.record_generation(t));
  t.e2e = 0.29;
  EXPECT_FALSE(m.record_generation(t));
  t.e2e = 1.0;
  EXPECT_TRUE(m.record_generation(t));
  EXPECT_EQ(registry.value("dsinfer_long_tail_requests_total"), 1.0);
  EXPECT_EQ(registry.histogram_snapshot("dsinfer_e2e_request_latency_seconds").count, 7u);
}

TEST(ServerMetricsTest, ExpositionWritesTheShortestNumberThatReadsBack) {
  server::MetricsRegistry registry;
  registry.gauge("test_fraction", "a fraction").set(121.469);
  registry.gauge("test_whole", "a whole number").set(700.0);
  registry.gauge("test_tiny", "a small number").set(1e-20);
  registry.gauge("test_third", "no short form").set(1.0 / 3.0);
  const std::string text = registry.prometheus_text();
  EXPECT_NE(text.find("test_fraction 121.469\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_whole 700\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_tiny 1e-20\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_third 0.3333333333333333\n"), std::string::npos) << text;
}

TEST(ServerTest, DrainFinishesInFlightStreams) {
  FakeEngine::Options opts;
  opts.token_delay = 5ms;
  ServerHarness h({}, opts);
  HttpResult result;
  std::thread client([&]() {
    result = post(h.port, "/v1/completions", R"({"prompt": "drain", "max_tokens": 60, "stream": true})");
  });
  EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 1; }));
  h.srv->drain();
  EXPECT_TRUE(wait_for([&]() { return h.srv->registry().value("dsinfer_num_requests_running") >= 0; }));
  client.join();
  h.thread.join();  // run() returns once drained
  StreamResult s = parse_stream(result.body, false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.finish[0], "length");
  EXPECT_EQ(h.engine->cancel_count(), 0u);
  EXPECT_THROW(RawConnection c(h.port), std::runtime_error);
}

}  // namespace
}  // namespace dsinfer::testing

namespace dsinfer::testing {
namespace {

TEST(ServeConfigTest, YamlSectionsAndErrors) {
  server::ServeConfig c;
  EXPECT_EQ(c.engine.cuda_graph_precapture_context, 4096);  // serve records its graphs at startup
  server::load_config_text(R"(
server:
  port: 9001
  api_key: k
  max_body_bytes: 1000
  idle_timeout_seconds: 2.5
  request_log_level: debug
engine:
  max_batch_size: 8
  enable_prefix_caching: false
  kv_cache_free_gpu_mem_fraction: 0.5
  device: cpu
  cuda_graph_precapture_context: 0
)",
                           "test.yaml", c);
  EXPECT_EQ(c.engine.cuda_graph_precapture_context, 0);
  EXPECT_EQ(c.server.port, 9001);
  EXPECT_EQ(c.server.api_key, "k");
  EXPECT_EQ(c.server.max_body_bytes, 1000);
  EXPECT_DOUBLE_EQ(c.server.idle_timeout_seconds, 2.5);
  EXPECT_EQ(c.engine.max_batch_size, 8);
  EXPECT_FALSE(c.engine.enable_prefix_caching);
  EXPECT_EQ(c.engine.device, "cpu");
  EXPECT_EQ(c.engine.max_num_tokens, 2048);  // untouched default
  server::validate(c);

  auto error_of = [](const std::string& yaml) {
    server::ServeConfig cfg;
    try {
      server::load_config_text(yaml, "bad.yaml", cfg);
      server::validate(cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("engine:\n  max_batch_sise: 3\n").find("engine.max_batch_sise"), std::string::npos);
  EXPECT_NE(error_of("circuit_breakr:\n  x: 1\n").find("unknown section \"circuit_breakr\""),
            std::string::npos);
  EXPECT_NE(error_of("server:\n  port: eighty\n").find("server.port must be an integer"), std::string::npos);
  EXPECT_NE(error_of("engine:\n  enable_chunked_context: maybe\n").find("true or false"), std::string::npos);
  EXPECT_NE(error_of("engine:\n  max_batch_size: 0\n").find("engine.max_batch_size"), std::string::npos);
  EXPECT_NE(error_of("engine:\n  cuda_arch: sm_70\n").find("engine.cuda_arch must be auto, sm_90 or sm_80"),
            std::string::npos);
  EXPECT_EQ(error_of("engine:\n  cuda_arch: sm_80\n"), "");
  EXPECT_NE(error_of("engine:\n  cuda_graph_precapture_context: -1\n")
                .find("engine.cuda_graph_precapture_context must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("server: [1, 2]\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(error_of("server:\n  port: [1\n").find("invalid YAML"), std::string::npos);
  EXPECT_EQ(error_of(""), "");
}

}  // namespace
}  // namespace dsinfer::testing
