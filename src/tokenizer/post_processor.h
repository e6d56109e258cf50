// Special tokens that encode(..., add_special_tokens=true) puts around the ids: from the
// add_bos_token / add_eos_token flags of tokenizer_config.json (LlamaTokenizerFast), or else
// from a TemplateProcessing post-processor in tokenizer.json.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

namespace dsinfer {

struct SpecialWrap {
  std::vector<int32_t> prefix, suffix;
};

// Reads the single-sequence template of a TemplateProcessing post-processor (possibly inside a
// Sequence); other post-processors add nothing.
SpecialWrap parse_post_processor(const nlohmann::json& j);

}  // namespace dsinfer
