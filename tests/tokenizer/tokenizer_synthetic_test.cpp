// Components the DeepSeek tokenizers do not use, checked against Hugging Face tokenizers on small
// generated tokenizer.json variants (tests/data/tokenizer/tools/gen_synthetic_cases.js).
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

TEST(TokenizerSynthetic, AllConfigsMatchHuggingFace) {
  const auto data = testing::read_json(testing::data_path("tokenizer/synthetic/synthetic_cases.json"));
  ASSERT_GE(data["configs"].size(), 20u);
  for (const auto& config : data["configs"]) {
    const std::string name = config["name"].get<std::string>();
    SCOPED_TRACE("config " + name);
    const Tokenizer tok = Tokenizer::from_json(config["tokenizer"].dump());
    for (const auto& c : config["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok.encode(text), ids) << "text: '" << text << "'";
      EXPECT_EQ(tok.encode(text, true), c["ids_with_special"].get<std::vector<int32_t>>())
          << "text: '" << text << "'";
      EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << "text: '" << text << "'";
      EXPECT_EQ(tok.decode(ids, true), c["decoded_skip_special"].get<std::string>())
          << "text: '" << text << "'";
    }
  }
}

}  // namespace
}  // namespace dsinfer
