// Completions options beyond the prompt: `echo` (the prompt's text before each choice's, whole and streamed,
// string and token-id prompts) and `suffix` (DeepSeek's fill-in-the-middle prompt layout), with their errors.
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

TEST(CompletionOptions, EchoErrors) {
  ServerHarness h;
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "echo": true, "logprobs": 1})"), 400,
               "echo", "unsupported_parameter");
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
