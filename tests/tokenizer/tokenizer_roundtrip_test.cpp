// Properties that hold by construction: round trips, long inputs stay fast enough to finish,
// inline special tokens, and invalid UTF-8 input is rejected.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "中文分词测试：深度求索发布了新的模型。",
      "日本語の文章です。カタカナとひらがな、漢字。",
      "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🇯🇵🇫🇷",
      "e\u0301 a\u0308 n\u0303 \u0915\u094D\u0937 \u05E9\u05C1\u05B8",
      "tab\tnewline\ncr\rvt\vff\fnbsp\u00a0ideo\u3000ls\u2028ps\u2029nel\u0085ogham\u1680end",
      "\t\t\n\r\n \u00a0 \u3000\u3000  \n",
      "0 12 345 6789 1234567890123 3.14159 1e-10 ٣٤٥ ๑๒๓",
      std::string(1000, 'a'),
      std::string(1000, '!'),
      std::string(777, '\n'),
      "x" + std::string(500, ' ') + "y",
      "<｜begin▁of▁sentence｜>system<｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>",
      "<｜User｜><｜User｜>  <|EOT|><｜tool▁sep｜>\n<｜place▁holder▁no▁7｜>",
      "<｜User not a token <｜ <| |> <｜begin▁of▁sentence",
      "\u200b\u200c\u200d\ufeff\u2060 invisible",
      "\U0001F600\U0001F9D1\u200D\U0001F91D\u200D\U0001F9D1 \U00010348 \U0010FFFD",
      "mixed: if (x <= 10) { return \"ok\"; } // 注释 コメント 🎉",
      "'s 't 're 've 'm 'll 'd DON'T I'M",
  };
  return t;
}

TEST(TokenizerRoundTrip, DecodeOfEncodeIsIdentity) {
  for (const Tokenizer* tok : {&testing::deepseek_v3(), &testing::tiny_code()}) {
    for (const std::string& text : texts()) {
      const auto ids = tok->encode(text);
      EXPECT_EQ(tok->decode(ids), text);
    }
  }
}

TEST(TokenizerRoundTrip, InlineSpecialTokensBecomeTheirIds) {
  const Tokenizer& tok = testing::deepseek_v3();
  const auto ids = tok.encode("a<｜User｜>b<｜end▁of▁sentence｜>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128803), 1);
  EXPECT_EQ(ids.back(), 1);
  // A token never merges with its neighbours.
  EXPECT_EQ(tok.encode("<｜User｜><｜User｜>"), (std::vector<int32_t>{128803, 128803}));
  // A prefix of a token is plain text.
  const auto partial = tok.encode("<｜User");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 128803), 0);
  EXPECT_EQ(tok.decode(partial), "<｜User");
}

TEST(TokenizerRoundTrip, DigitsSplitInGroupsOfThree) {
  const Tokenizer& tok = testing::deepseek_v3();
  const auto ids = tok.encode("1234567");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(tok.decode({ids[0]}), "123");
  EXPECT_EQ(tok.decode({ids[1]}), "456");
  EXPECT_EQ(tok.decode({ids[2]}), "7");
}

TEST(TokenizerRoundTrip, HugeSingleWord) {
  const Tokenizer& tok = testing::deepseek_v3();
  std::string word;
  for (int i = 0; word.size() < 100 * 1024; ++i) word += "abcdefghijklmnopqrstuvwxyz"[(i * 7) % 26];
  const auto ids = tok.encode(word);
  EXPECT_GT(ids.size(), 100u);
  EXPECT_EQ(tok.decode(ids), word);
  const std::string same(100 * 1024, 'z');
  EXPECT_EQ(tok.decode(tok.encode(same)), same);
}

TEST(TokenizerRoundTrip, MegabyteOfSpaces) {
  const Tokenizer& tok = testing::deepseek_v3();
  const std::string spaces(1 << 20, ' ');
  const auto ids = tok.encode(spaces);
  EXPECT_LT(ids.size(), spaces.size() / 4);
  EXPECT_EQ(tok.decode(ids), spaces);
  const std::string padded = "a" + spaces + "b";
  EXPECT_EQ(tok.decode(tok.encode(padded)), padded);
}

TEST(TokenizerRoundTrip, InvalidUtf8IsRejectedWithOffset) {
  const Tokenizer& tok = testing::deepseek_v3();
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"abc\xff", 3}, {"\xc0\xaf", 0},         {"ok \xe4\xbd", 3},         {"\xed\xa0\x80 surrogate", 0},
      {"x\x80y", 1},  {"\xf4\x90\x80\x80", 0}, {"good 中文 \xe4\xb8", 12}, {"\xf0\x9f\x98", 0},
  };
  for (const auto& [text, offset] : bad) {
    try {
      tok.encode(text);
      ADD_FAILURE() << "no error for invalid UTF-8 at " << offset;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(offset)), std::string::npos)
          << e.what();
    }
  }
}

TEST(TokenizerRoundTrip, DecodeRepairsInvalidUtf8LikeHuggingFace) {
  const Tokenizer& tok = testing::deepseek_v3();
  // "中" is E4 B8 AD; its first two bytes alone become one U+FFFD.
  const auto e4 = tok.token_to_id("ä");  // byte 0xE4
  const auto b8 = tok.token_to_id("¸");  // byte 0xB8
  const auto a = tok.token_to_id("a");
  ASSERT_TRUE(e4 && b8 && a);
  EXPECT_EQ(tok.decode({*e4, *b8}), "\uFFFD");
  EXPECT_EQ(tok.decode({*e4, *b8, *a}), "\uFFFDa");
  EXPECT_EQ(tok.decode({*b8, *b8}), "\uFFFD\uFFFD");
  EXPECT_THROW(tok.decode({tok.vocab_size()}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
}

}  // namespace
}  // namespace dsinfer
