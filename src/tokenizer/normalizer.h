// Normalizers of tokenizer.json. Only the identity forms occur in the DeepSeek tokenizers
// (null, or a Sequence of nothing); any real normalization is rejected with a clear error.
#pragma once
#include <nlohmann/json.hpp>

namespace dsinfer {

// Throws dsinfer::Error unless the "normalizer" value leaves text unchanged.
void check_normalizer_is_identity(const nlohmann::json& j);

}  // namespace dsinfer
