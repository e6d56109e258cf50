// TemplateProcessing "single" template parsing.
#include "tokenizer/post_processor.h"

#include <string>

#include "core/error.h"

namespace dsinfer {

SpecialWrap parse_post_processor(const nlohmann::json& j) {
  SpecialWrap wrap;
  if (j.is_null() || !j.is_object()) return wrap;
  const std::string type = j.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& child : j.value("processors", nlohmann::json::array())) {
      SpecialWrap w = parse_post_processor(child);
      if (!w.prefix.empty() || !w.suffix.empty()) return w;
    }
    return wrap;
  }
  if (type != "TemplateProcessing") return wrap;
  const auto& specials = j.at("special_tokens");
  bool seen_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    DSI_CHECK(piece.contains("SpecialToken"),
              "tokenizer: TemplateProcessing piece must be Sequence or SpecialToken");
    const std::string name = piece["SpecialToken"].at("id").get<std::string>();
    DSI_CHECK(specials.contains(name), "tokenizer: TemplateProcessing uses undefined special token '", name,
              "'");
    for (const auto& id : specials[name].at("ids")) {
      (seen_sequence ? wrap.suffix : wrap.prefix).push_back(id.get<int32_t>());
    }
  }
  return wrap;
}

}  // namespace dsinfer
