// IncrementalDetokenizer: deltas concatenate to the full decode and never split a character.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

void expect_streams_like_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string delta = detok.push(id);
    EXPECT_EQ(utf8::find_invalid(delta), utf8::kValid) << "delta splits a UTF-8 character";
    streamed += delta;
  }
  const std::string tail = detok.flush();
  EXPECT_EQ(utf8::find_invalid(tail), utf8::kValid);
  streamed += tail;
  EXPECT_EQ(streamed, tok.decode(ids, skip));
}

TEST(IncrementalDetokenizer, MatchesFullDecodeOnFixtures) {
  const Tokenizer& tok = testing::deepseek_v3();
  const auto cases = testing::read_json(testing::data_path("tokenizer/deepseek-v3/cases.json"))["cases"];
  for (const auto& c : cases) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    expect_streams_like_decode(tok, ids, false);
    expect_streams_like_decode(tok, ids, true);
  }
}

TEST(IncrementalDetokenizer, MultiByteCharactersSpreadOverTokens) {
  const Tokenizer& tok = testing::deepseek_v3();
  // Byte-level tokens of single bytes: 中 = E4 B8 AD, 😀 = F0 9F 98 80.
  auto byte_id = [&](const char* ch) { return *tok.token_to_id(ch); };
  const int32_t e4 = byte_id("ä"), b8 = byte_id("¸"), ad = byte_id("Ń");  // 0xAD maps to U+0143
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.push(e4), "");
  EXPECT_EQ(detok.push(b8), "");
  EXPECT_EQ(detok.push(ad), "中");
  EXPECT_EQ(detok.flush(), "");
  // An incomplete sequence at the end becomes U+FFFD on flush, as in the full decode.
  IncrementalDetokenizer cut(tok);
  EXPECT_EQ(cut.push(e4), "");
  EXPECT_EQ(cut.push(b8), "");
  EXPECT_EQ(cut.flush(), "\uFFFD");
  EXPECT_EQ(tok.decode({e4, b8}), "\uFFFD");
  // An interrupted sequence is replaced as soon as it is known to be bad.
  IncrementalDetokenizer bad(tok);
  EXPECT_EQ(bad.push(e4), "");
  EXPECT_EQ(bad.push(*tok.token_to_id("a")), "\uFFFDa");
  expect_streams_like_decode(tok, {e4, b8, ad, e4, b8, 0, ad, ad, e4}, false);
  expect_streams_like_decode(tok, {e4, b8, ad, e4, b8, 0, ad, ad, e4}, true);
}

TEST(IncrementalDetokenizer, RoundTripTexts) {
  const Tokenizer& tok = testing::deepseek_v3();
  for (const char* text : {"在采用 TensorRT-LLM 部署 DeepSeek 时 👨‍👩‍👧‍👦 🇨🇳",
                           "e\u0301\u0302 ok \U0001F600\U0001F600",
                           "<｜User｜>你好<｜Assistant｜>こんにちは<｜end▁of▁sentence｜>"}) {
    expect_streams_like_decode(tok, tok.encode(text), false);
    expect_streams_like_decode(tok, tok.encode(text), true);
  }
}

TEST(IncrementalDetokenizer, UnknownIdThrows) {
  const Tokenizer& tok = testing::deepseek_v3();
  IncrementalDetokenizer detok(tok);
  EXPECT_THROW(detok.push(tok.vocab_size() + 5), Error);
}

}  // namespace
}  // namespace dsinfer
