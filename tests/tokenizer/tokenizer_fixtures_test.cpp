// Hugging Face ground truth: every fixture case must give exactly the reference ids and text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

using ::dsinfer::testing::data_path;
using ::dsinfer::testing::read_json;

TEST(TokenizerFixtures, DeepSeekV3CasesMatchHuggingFace) {
  const Tokenizer& tok = testing::deepseek_v3();
  const auto cases = read_json(data_path("tokenizer/deepseek-v3/cases.json"))["cases"];
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), expected) << "text: " << text;
    EXPECT_EQ(tok.decode(expected), c["decoded"].get<std::string>()) << "text: " << text;
  }
}

TEST(TokenizerFixtures, DeepSeekV3ChatCasesMatchHuggingFace) {
  const Tokenizer& tok = testing::deepseek_v3();
  const auto cases = read_json(data_path("tokenizer/deepseek-v3/chat_cases.json"))["cases"];
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string rendered = c["rendered"].get<std::string>();
    EXPECT_EQ(tok.encode(rendered), c["ids"].get<std::vector<int32_t>>()) << "rendered: " << rendered;
    EXPECT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>()), rendered);
  }
}

TEST(TokenizerFixtures, TinyCodePromptIdsMatchTransformers) {
  const Tokenizer& tok = testing::tiny_code();
  const auto cases = read_json(data_path("tokenizer/deepseek-v3-tiny-code/greedy_cases.json"))["cases"];
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string prompt = c["prompt"].get<std::string>();
    const auto expected = c["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(prompt, /*add_special_tokens=*/true), expected) << "prompt: " << prompt;
    std::vector<int32_t> without_bos(expected.begin() + 1, expected.end());
    EXPECT_EQ(tok.encode(prompt), without_bos);
    EXPECT_EQ(tok.decode(without_bos), prompt);
    // The reference greedy continuation decodes to the recorded text.
    EXPECT_EQ(tok.decode(c["greedy_ids"].get<std::vector<int32_t>>()), c["greedy_text"].get<std::string>());
  }
}

TEST(TokenizerFixtures, DeepSeekV3Config) {
  const Tokenizer& tok = testing::deepseek_v3();
  EXPECT_EQ(tok.vocab_size(), 128815);
  EXPECT_EQ(tok.bos_token(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok.eos_token(), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.pad_id(), 1);
  EXPECT_TRUE(tok.add_bos_token());
  EXPECT_EQ(tok.model_max_length(), 131072);
  EXPECT_THAT(tok.chat_template(), ::testing::StartsWith("{% if not add_generation_prompt is defined %}"));
  EXPECT_EQ(tok.encode("Hi", true).front(), 0);
  EXPECT_EQ(tok.encode("Hi", true).size(), tok.encode("Hi").size() + 1);
  EXPECT_EQ(tok.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok.id_to_token(128803), "<｜User｜>");
  EXPECT_EQ(tok.token_to_id("Ġthe"), tok.encode(" the").at(0));
  EXPECT_EQ(tok.token_to_id("definitely not a token"), std::nullopt);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(128805));   // <|EOT|>
  EXPECT_FALSE(tok.is_special(128803));  // <｜User｜> is an added token but not special
  EXPECT_FALSE(tok.is_special(128814));
  EXPECT_FALSE(tok.is_special(100));
  EXPECT_EQ(tok.decode({0, 19923, 1}, /*skip_special_tokens=*/true), "Hello");
  EXPECT_EQ(tok.decode({0, 19923, 1}), "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>");
}

}  // namespace
}  // namespace dsinfer
