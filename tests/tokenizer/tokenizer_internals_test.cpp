// Internals: the two BPE merge strategies agree (also for merge lists whose ranks are not in
// creation order), Oniguruma-compatible \s, UTF-8 lossy decoding, and concurrent use.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/file_io.h"
#include "tokenizer/json_fast.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

void expect_strategies_agree(const BpeModel& model, const std::vector<int32_t>& alphabet, int words,
                             int max_len) {
  std::mt19937 rng(1234);
  for (int w = 0; w < words; ++w) {
    const int len = 2 + static_cast<int>(rng() % static_cast<unsigned>(max_len - 1));
    std::vector<int32_t> syms(len);
    for (auto& s : syms) s = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(model.merge_for_testing(syms, false), model.merge_for_testing(syms, true));
  }
}

TEST(TokenizerInternals, MergeStrategiesAgreeOnDeepSeekV3) {
  const auto json =
      nlohmann::json::parse(read_gzip_file(testing::data_path("tokenizer/deepseek-v3/tokenizer.json.gz")));
  const auto model = BpeModel::from_json(json["model"]);
  std::vector<int32_t> alphabet;
  for (const char* ch : {"a", "b", "e", "n", "t", "h", "i", "s", "Ġ", "Ċ", "1", "0", "="}) {
    alphabet.push_back(*model->token_to_id(ch));
  }
  expect_strategies_agree(*model, alphabet, 3000, 32);
}

TEST(TokenizerInternals, MergeStrategiesAgreeWhenRanksAreOutOfOrder) {
  // "ab a" and "ab c" (ranks 0, 1) only appear after "a b" (rank 2) merged: merging creates pairs
  // ranked below the rank being processed, which must then go first ("abab" -> "aba" "b").
  const auto model = BpeModel::from_json(nlohmann::json::parse(R"({
    "type": "BPE",
    "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "cc": 5, "bcc": 6, "ccc": 7, "abab": 8, "aba": 9},
    "merges": ["ab a", "ab c", "a b", "c c", "b cc", "cc c", "ab ab"]})"));
  EXPECT_EQ(model->merge_for_testing({0, 1, 0, 1}, true), (std::vector<int32_t>{9, 1}));
  expect_strategies_agree(*model, {0, 1, 2}, 5000, 32);
}

TEST(TokenizerInternals, FastLoaderAgreesWithNlohmann) {
  for (const std::string& text :
       {read_gzip_file(testing::data_path("tokenizer/deepseek-v3/tokenizer.json.gz")),
        testing::read_json(testing::data_path("tokenizer/deepseek-v3-tiny-code/tokenizer.json")).dump(1),
        std::string(R"({"merges_first": 1, "model": {"merges": [["\u0041", "\n"], "\" \\"], "type": "BPE",
                        "vocab": {"\u0041": 0, "\n": 1, "A\n": 2, "\ud83d\ude00\t\/": 3, "\"": 4, "\\": 5}}})")}) {
    const nlohmann::json full = nlohmann::json::parse(text);
    const auto fast = extract_bpe_tables(text);
    ASSERT_TRUE(fast.has_value());
    ASSERT_EQ(fast->tables.vocab.size(), full["model"]["vocab"].size());
    for (const auto& [token, id] : fast->tables.vocab) EXPECT_EQ(full["model"]["vocab"].at(token), id);
    const auto& merges = full["model"]["merges"];
    ASSERT_EQ(fast->tables.merges.size(), merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = fast->tables.merges[i];
      if (merges[i].is_string()) {
        EXPECT_EQ(a + " " + b, merges[i].get<std::string>());
      } else {
        EXPECT_EQ(a, merges[i][0].get<std::string>());
        EXPECT_EQ(b, merges[i][1].get<std::string>());
      }
    }
    nlohmann::json rest = nlohmann::json::parse(fast->rest);
    nlohmann::json expected = full;
    expected["model"]["vocab"] = nlohmann::json::object();
    expected["model"]["merges"] = nlohmann::json::array();
    EXPECT_EQ(rest, expected);
  }
  EXPECT_EQ(extract_bpe_tables(R"({"model": {"vocab": {"a": 1.5}}})"), std::nullopt);
  EXPECT_EQ(extract_bpe_tables(R"({"model": {"vocab": {"\ud800": 1}}})"), std::nullopt);
  EXPECT_EQ(extract_bpe_tables(R"({"model": {"vocab": {}, "merges": ["a b c"]}})"), std::nullopt);
  EXPECT_EQ(extract_bpe_tables(R"({"model": {"vocab": {"a": 1})"), std::nullopt);
  // The rest still goes through nlohmann, so errors outside the tables are reported.
  EXPECT_THROW(
      Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "x": tru})"),
      Error);
}

TEST(TokenizerInternals, WhitespaceFollowsOniguruma) {
  // Oniguruma's \s is Unicode White_Space: it excludes U+180E and U+200B, which PCRE2 differs on.
  const Regex space(R"(\s+)");
  std::vector<std::pair<size_t, size_t>> m;
  space.find_all("a\u180Eb", m);
  EXPECT_TRUE(m.empty());
  space.find_all("\u0085\u00A0\u1680\u2000\u200A\u2028\u2029\u202F\u205F\u3000\t\n\v\f\r ", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].first, 0u);
  m.clear();
  const Regex not_space(R"(\S+)");
  not_space.find_all(" \u180E\u200B ", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(
      oniguruma_compatible_pattern(R"([\s\d]\\s[]\s])"),
      "[\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
      "\\x{3000}\\d]\\\\s[]\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
      "\\x{202F}\\x{205F}\\x{3000}]");
}

TEST(TokenizerInternals, LossyUtf8ReplacesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    utf8::append_lossy(s, true, out);
    return out;
  };
  EXPECT_EQ(lossy("a\xE4\xB8"), "a\uFFFD");                // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate: each byte
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "A"),
            "\uFFFDA");                                              // interrupted 4-byte sequence
  EXPECT_EQ(lossy("\xC0\xAF"), "\uFFFD\uFFFD");                      // overlong
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  EXPECT_EQ(lossy("\xFF\xFE ok \xE2\x82\xAC"), "\uFFFD\uFFFD ok \u20AC");
  std::string held;
  EXPECT_EQ(utf8::append_lossy("ab\xF0\x9F", false, held), 2u);
  EXPECT_EQ(held, "ab");
}

TEST(TokenizerInternals, ConcurrentEncodeAndDecodeAgree) {
  const Tokenizer tok = testing::deepseek_v3();  // copies share the immutable state
  const auto cases =
      testing::read_json(testing::data_path("tokenizer/deepseek-v3/extra_cases.json"))["cases"];
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& c : cases) {
    texts.push_back(c["text"].get<std::string>());
    expected.push_back(c["ids"].get<std::vector<int32_t>>());
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const Tokenizer local = tok;
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + static_cast<size_t>(t) * 13) % texts.size();
          if (local.encode(texts[k]) != expected[k]) ++failures[t];
          if (local.decode(expected[k]) != local.decode(local.encode(texts[k]))) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

}  // namespace
}  // namespace dsinfer
