// Logprobs of tokens that are not UTF-8 on their own (byte-fallback tokens such as the byte 0xE4, the first
// of the three bytes of "你"), with the DeepSeek-V3 tokenizer: `bytes` are the token's own bytes, text_offset
// advances by them, and completions' top_logprobs keeps every alternative under a distinct key.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "http_test_client.h"
#include "server_harness.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;

const Tokenizer& deepseek_v3() {
  static const Tokenizer tok = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  return tok;
}

// The id whose bytes are exactly `bytes`.
int32_t id_of_bytes(const Tokenizer& tok, const std::string& bytes) {
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    try {
      if (tok.token_bytes(id) == bytes) return id;
    } catch (const std::exception&) {
    }
  }
  ADD_FAILURE() << "no token for these bytes";
  return 0;
}

TEST(OpenAiResponseTest, LogprobsOfPartialUtf8TokensKeepTheirBytes) {
  const Tokenizer& tok = deepseek_v3();
  // "你" is E4 BD A0; 0xE5 begins another character.
  const int32_t e4 = id_of_bytes(tok, "\xe4"), bd = id_of_bytes(tok, "\xbd"), a0 = id_of_bytes(tok, "\xa0"),
                e5 = id_of_bytes(tok, "\xe5"), hello = id_of_bytes(tok, "Hello");
  ASSERT_EQ(tok.decode({e4, bd, a0}), "你");
  const std::vector<TokenLogprob> lps = {{hello, -0.1f, {{hello, -0.1f}, {e4, -2.0f}}},
                                         {e4, -0.5f, {{e4, -0.5f}, {e5, -1.0f}, {hello, -3.0f}}},
                                         {bd, -0.2f, {{bd, -0.2f}}},
                                         {a0, -0.3f, {{a0, -0.3f}}}};

  const json chat = server::logprobs_json(tok, lps, 3, /*chat=*/true);
  const json& content = chat["content"];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0]["token"], "Hello");
  EXPECT_EQ(content[0]["bytes"], json::array({'H', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(content[1]["token"], "\xef\xbf\xbd");  // the text is lossy, the bytes are not
  EXPECT_EQ(content[1]["bytes"], json::array({0xe4}));
  EXPECT_EQ(content[2]["bytes"], json::array({0xbd}));
  EXPECT_EQ(content[3]["bytes"], json::array({0xa0}));
  EXPECT_EQ(content[1]["top_logprobs"][1]["bytes"], json::array({0xe5}));

  const json legacy = server::logprobs_json(tok, lps, 3, /*chat=*/false, /*offset=*/10);
  EXPECT_EQ(legacy["text_offset"], json::array({10, 15, 16, 17}));
  EXPECT_EQ(legacy["tokens"][1], "\xef\xbf\xbd");
  // Both partial alternatives are kept, under distinct keys.
  const json& top = legacy["top_logprobs"][1];
  EXPECT_EQ(top.size(), 3u) << top.dump();
  EXPECT_EQ(top["bytes:\\xe4"], -0.5f);
  EXPECT_EQ(top["bytes:\\xe5"], -1.0f);
  EXPECT_EQ(top["Hello"], -3.0f);
  EXPECT_EQ(legacy["top_logprobs"][0]["bytes:\\xe4"], -2.0f);
  EXPECT_EQ(server::logprobs_text_bytes(tok, lps), 8u);
}

// Over HTTP, streamed: each chunk's text_offset continues from the previous chunk's tokens' bytes (it used to
// continue from the lossy text, 3 bytes of U+FFFD per byte token), the same offsets as without streaming.
TEST(OpenAiResponseTest, StreamedTextOffsetsCountTokenBytes) {
  FakeEngine::Options opts;
  opts.words = "你好，世界";  // byte tokens in the tiny tokenizer
  ServerHarness h({}, opts);
  const Tokenizer& tok = h.engine->tokenizer();
  const std::string base = R"("prompt": "offsets", "max_tokens": 12, "seed": 3, "logprobs": 1)";
  const std::vector<int32_t> ids = h.engine->expected_ids(encode_text_prompt(tok, "offsets"), 3, 12);
  std::vector<size_t> expected;
  size_t offset = 0, partial = 0;
  for (int32_t id : ids) {
    expected.push_back(offset);
    offset += tok.token_bytes(id).size();
    partial += utf8::find_invalid(tok.token_bytes(id)) != utf8::kValid;
  }
  ASSERT_GT(partial, 0u) << "the test needs tokens that are not UTF-8 on their own";

  const json whole = json::parse(post(h.port, "/v1/completions", "{" + base + "}").body);
  EXPECT_EQ(whole["choices"][0]["logprobs"]["text_offset"].get<std::vector<size_t>>(), expected);
  std::vector<size_t> streamed;
  for (const std::string& p :
       sse_payloads(post(h.port, "/v1/completions", "{" + base + R"(, "stream": true})").body)) {
    if (p == "[DONE]") continue;
    const json chunk = json::parse(p);
    const json& lp = chunk["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const json& o : lp["text_offset"]) streamed.push_back(o.get<size_t>());
  }
  EXPECT_EQ(streamed, expected);
}

}  // namespace
}  // namespace dsinfer::testing
