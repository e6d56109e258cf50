// Completions options beyond the prompt: `echo` (the prompt's text before each choice's, whole and streamed,
// string and token-id prompts; with logprobs, the prompt's tokens scored, max_tokens 0 scoring alone) and
// `suffix` (DeepSeek's fill-in-the-middle prompt layout), with their errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "expect_error.h"
#include "http_test_client.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;

std::string v3_tokenizer_dir() {
  return std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3";
}

TEST(CompletionOptions, EchoWritesThePromptFirst) {
  ServerHarness h;
  const auto ids = encode_text_prompt(h.engine->tokenizer(), "def add(a, b):");
  const std::string generated = h.engine->expected_text(ids, 5, 6);
  json j = json::parse(post(h.port, "/v1/completions",
                            R"({"prompt": "def add(a, b):", "max_tokens": 6, "seed": 5, "echo": true})")
                           .body);
  EXPECT_EQ(j["choices"][0]["text"], "def add(a, b):" + generated);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  // Streamed: the prompt comes first, in the first chunk of each choice.
  HttpResult r =
      post(h.port, "/v1/completions",
           R"({"prompt": "def add(a, b):", "max_tokens": 6, "seed": 5, "echo": true, "stream": true,
                          "n": 2})");
  ASSERT_EQ(r.status, 200);
  std::map<int, std::string> text;
  std::map<int, std::string> first;
  for (const std::string& p : sse_payloads(r.body)) {
    if (p == "[DONE]") continue;
    const json chunk = json::parse(p);
    for (const json& c : chunk["choices"]) {
      const int i = c["index"];
      if (!first.count(i)) first[i] = c["text"];
      text[i] += c["text"].get<std::string>();
    }
  }
  ASSERT_EQ(text.size(), 2u) << r.body;
  EXPECT_EQ(text[0], "def add(a, b):" + generated);
  for (int i : {0, 1}) EXPECT_EQ(first[i].rfind("def add(a, b):", 0), 0u) << first[i];
  // A token-id prompt echoes its decoded text.
  json body = {{"prompt", ids}, {"max_tokens", 2}, {"seed", 5}, {"echo", true}};
  j = json::parse(post(h.port, "/v1/completions", body.dump()).body);
  EXPECT_EQ(j["choices"][0]["text"], h.engine->tokenizer().decode(ids) + h.engine->expected_text(ids, 5, 2));
}

// The logprobs of an echoed prompt's tokens (the fake engine's scores): each prompt token's text, the first
// one's logprob and alternatives null, then the generated tokens'; text_offset counts through both into the
// choice's text (which the BOS the tokenizer put before the prompt is not part of).
void expect_echo_logprobs(const json& lp, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          size_t generated, int32_t top) {
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + generated) << lp.dump();
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size() + generated; ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset) << i;
    // ASCII here: text and bytes agree.
    if (i > 0 || prompt[0] != tok.bos_id()) offset += lp["tokens"][i].get<std::string>().size();
    if (i >= prompt.size()) {
      EXPECT_EQ(lp["token_logprobs"][i], -0.5) << i;  // the fake's generated tokens
      continue;
    }
    EXPECT_EQ(lp["tokens"][i], tok.decode({prompt[i]})) << i;
    if (i == 0) {
      EXPECT_TRUE(lp["token_logprobs"][0].is_null());
      EXPECT_TRUE(lp["top_logprobs"][0].is_null());
      continue;
    }
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -0.25f * static_cast<float>(i)) << i;
    ASSERT_EQ(lp["top_logprobs"][i].size(), static_cast<size_t>(top)) << i;
    if (top > 0) {
      EXPECT_FLOAT_EQ(lp["top_logprobs"][i][tok.decode({prompt[i]})].get<float>(), -0.25f * i);
    }
  }
}

TEST(CompletionOptions, EchoWithLogprobsScoresThePrompt) {
  ServerHarness h;
  const Tokenizer& tok = h.engine->tokenizer();
  const std::string prompt = "def add(a, b):";
  const auto ids = encode_text_prompt(tok, prompt);
  const std::string generated = h.engine->expected_text(ids, 5, 3);
  HttpResult r =
      post(h.port, "/v1/completions",
           R"({"prompt": "def add(a, b):", "max_tokens": 3, "seed": 5, "echo": true, "logprobs": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(h.engine->last_sampling().prompt_logprobs, 2);
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], prompt + generated);
  expect_echo_logprobs(j["choices"][0]["logprobs"], tok, ids, 3, 2);
  // max_tokens 0: the prompt scored alone (a prompt's loglikelihood); logprobs 0: no alternatives.
  r = post(h.port, "/v1/completions",
           R"({"prompt": "def add(a, b):", "max_tokens": 0, "echo": true, "logprobs": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], prompt);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  expect_echo_logprobs(j["choices"][0]["logprobs"], tok, ids, 0, 0);
  // Streamed, two choices: each choice's first chunk carries the prompt's text and entries.
  r = post(h.port, "/v1/completions",
           R"({"prompt": "def add(a, b):", "max_tokens": 2, "seed": 5, "echo": true, "logprobs": 1,
               "stream": true, "n": 2})");
  ASSERT_EQ(r.status, 200);
  std::map<int, json> merged;  // per choice: the chunks' logprobs lists joined
  std::map<int, int> chunks;
  for (const std::string& p : sse_payloads(r.body)) {
    if (p == "[DONE]") continue;
    const json chunk = json::parse(p);
    for (const json& c : chunk["choices"]) {
      const int i = c["index"];
      if (c["logprobs"].is_null()) continue;
      if (chunks[i]++ == 0) {
        EXPECT_EQ(c["text"].get<std::string>().rfind(prompt, 0), 0u) << c.dump();
        EXPECT_EQ(c["logprobs"]["tokens"].size(), ids.size() + 1) << c.dump();  // the prompt's + one token
        merged[i] = json{{"tokens", json::array()},
                         {"token_logprobs", json::array()},
                         {"top_logprobs", json::array()},
                         {"text_offset", json::array()}};
      }
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const json& v : c["logprobs"][key]) merged[i][key].push_back(v);
    }
  }
  ASSERT_EQ(merged.size(), 2u) << r.body;
  for (const auto& [i, lp] : merged) expect_echo_logprobs(lp, tok, ids, 2, 1);
}

// A whole answer of several candidates per prompt scores each prompt once: one engine request per prompt
// asks for the scores and every choice of that prompt carries them; streamed choices score their own.
TEST(CompletionOptions, EchoWithLogprobsScoresEachPromptOnceForAWholeAnswer) {
  ServerHarness h;
  const Tokenizer& tok = h.engine->tokenizer();
  const auto a = encode_text_prompt(tok, "def add(a, b):"), b = encode_text_prompt(tok, "class Point:");
  HttpResult r = post(h.port, "/v1/completions",
                      R"({"prompt": ["def add(a, b):", "class Point:"], "max_tokens": 2, "n": 3, "seed": 1,
                          "echo": true, "logprobs": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(h.engine->submitted(), 6u);
  EXPECT_EQ(h.engine->scored_submissions(), 2u);
  const json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) expect_echo_logprobs(j["choices"][i]["logprobs"], tok, i < 3 ? a : b, 2, 1);
  // best_of: the candidates ranked by their generated tokens; each returned one carries the prompt's scores.
  r = post(h.port, "/v1/completions",
           R"({"prompt": "def add(a, b):", "max_tokens": 2, "n": 2, "best_of": 4, "seed": 1, "echo": true,
               "logprobs": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(h.engine->scored_submissions(), 3u);
  for (const json& c : json::parse(r.body)["choices"]) expect_echo_logprobs(c["logprobs"], tok, a, 2, 1);
  // Streamed: each choice's first chunk carries its own.
  r = post(
      h.port, "/v1/completions",
      R"({"prompt": "def add(a, b):", "max_tokens": 2, "n": 2, "echo": true, "logprobs": 1, "stream": true})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(h.engine->scored_submissions(), 5u);
}

TEST(CompletionOptions, EchoErrors) {
  ServerHarness h;
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 0})"), 400, "max_tokens",
               "invalid_value");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 0, "echo": true})"), 400,
               "max_tokens", "invalid_value");
  expect_error(
      post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": -1, "echo": true, "logprobs": 1})"),
      400, "max_tokens", "invalid_value");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "echo": true, "logprobs": 21})"), 400,
               "logprobs", "invalid_value");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "echo": true, "suffix": "y"})"), 400,
               "echo", "invalid_value");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "echo": 1})"), 400, "echo", "invalid_type");
}

TEST(CompletionOptions, SuffixIsFillInTheMiddle) {
  FakeEngine::Options o;
  o.tokenizer_dir = v3_tokenizer_dir();
  ServerHarness h({}, o);
  HttpResult r = post(h.port, "/v1/completions",
                      R"({"prompt": "def area(r):\n", "suffix": "\n    return a\n", "max_tokens": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Tokenizer& tok = h.engine->tokenizer();
  const std::string layout = "<｜fim▁begin｜>def area(r):\n<｜fim▁hole｜>\n    return a\n<｜fim▁end｜>";
  EXPECT_EQ(h.engine->last_prompt(), tok.encode(layout, true));
  EXPECT_EQ(tok.decode(h.engine->last_prompt()), "<｜begin▁of▁sentence｜>" + layout);
  // Token-id prompts cannot be laid out around a hole.
  expect_error(post(h.port, "/v1/completions", R"({"prompt": [1, 2, 3], "suffix": "x"})"), 400, "suffix",
               "invalid_value");
}

TEST(CompletionOptions, SuffixNeedsFimTokens) {
  ServerHarness h;  // the tiny model's 4096-token vocabulary has none
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "suffix": "y"})"), 400, "suffix",
               "unsupported_parameter");
  // An empty suffix is no suffix.
  EXPECT_EQ(post(h.port, "/v1/completions", R"({"prompt": "x", "suffix": "", "max_tokens": 1})").status, 200);
}

}  // namespace
}  // namespace dsinfer::testing
