// Parsing of tokenizer_config.json (tokens as strings or {"content": ...} objects).
#include "tokenizer/tokenizer_config.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace dsinfer {
namespace {

std::string token_field(const nlohmann::json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    DSI_CHECK(c != it->end() && c->is_string(), source, ": '", key, "' object has no string 'content'");
    return c->get<std::string>();
  }
  fail(source, ": '", key, "' must be a string or an object with 'content'");
}

std::optional<bool> bool_field(const nlohmann::json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  DSI_CHECK(it->is_boolean(), source, ": '", key, "' must be a boolean");
  return it->get<bool>();
}

std::string chat_template_field(const nlohmann::json& j, const std::string& source) {
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  DSI_CHECK(it->is_array(), source, ": 'chat_template' must be a string or a list of named templates");
  for (const auto& entry : *it) {
    DSI_CHECK(entry.is_object() && entry.contains("name") && entry.contains("template"), source,
              ": each named chat template needs 'name' and 'template'");
    if (entry["name"] == "default") return entry["template"].get<std::string>();
  }
  return "";
}

}  // namespace

TokenizerConfig parse_tokenizer_config(const nlohmann::json& j, const std::string& source) {
  DSI_CHECK(j.is_object(), source, ": expected a JSON object");
  TokenizerConfig c;
  c.bos_token = token_field(j, "bos_token", source);
  c.eos_token = token_field(j, "eos_token", source);
  c.pad_token = token_field(j, "pad_token", source);
  c.unk_token = token_field(j, "unk_token", source);
  c.add_bos_token = bool_field(j, "add_bos_token", source);
  c.add_eos_token = bool_field(j, "add_eos_token", source);
  c.chat_template = chat_template_field(j, source);
  if (auto it = j.find("model_max_length"); it != j.end() && it->is_number()) {
    const double v = it->get<double>();
    const double cap = static_cast<double>(std::numeric_limits<int64_t>::max());
    c.model_max_length = v >= cap ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(std::floor(v));
  }
  return c;
}

}  // namespace dsinfer
