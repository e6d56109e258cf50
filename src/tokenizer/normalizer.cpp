// Validation of the "normalizer" section.
#include "tokenizer/normalizer.h"

#include <string>

#include "core/error.h"

namespace dsinfer {

void check_normalizer_is_identity(const nlohmann::json& j) {
  if (j.is_null()) return;
  DSI_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
            "tokenizer: normalizer must be null or an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    DSI_CHECK(j.contains("normalizers") && j["normalizers"].is_array(),
              "tokenizer: Sequence normalizer needs a 'normalizers' array");
    for (const auto& child : j["normalizers"]) check_normalizer_is_identity(child);
    return;
  }
  fail("tokenizer: unsupported normalizer type '", type,
       "' (supported: null and Sequence of supported normalizers)");
}

}  // namespace dsinfer
