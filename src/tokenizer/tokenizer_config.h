// tokenizer_config.json: special token names, add_bos/eos flags, chat template, max length.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dsinfer {

struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;  // "" when absent
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;  // "" when absent
  std::optional<int64_t> model_max_length;
};

// Parses the config object; `source` names it in error messages.
TokenizerConfig parse_tokenizer_config(const nlohmann::json& j, const std::string& source);

}  // namespace dsinfer
