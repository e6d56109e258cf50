// Prompt encoding and chat rendering.
#include "engine/prompt.h"

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace dsinfer {

std::vector<int32_t> encode_text_prompt(const Tokenizer& tokenizer, const std::string& text) {
  DSI_CHECK(!text.empty(), "the prompt is empty");
  return tokenizer.encode(text, /*add_special_tokens=*/true);
}

void validate_messages(const nlohmann::json& messages) {
  DSI_CHECK(messages.is_array(), "messages must be a JSON array of {\"role\", \"content\"} objects");
  DSI_CHECK(!messages.empty(), "messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    DSI_CHECK(m.is_object(), "messages[", i, "] must be an object");
    DSI_CHECK(m.contains("role") && m["role"].is_string(), "messages[", i, "].role must be a string");
    DSI_CHECK(!m.contains("content") || m["content"].is_string() || m["content"].is_null(), "messages[", i,
              "].content must be a string");
  }
}

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        bool add_generation_prompt) {
  validate_messages(messages);
  DSI_CHECK(!tokenizer.chat_template().empty(), "the model has no chat_template in tokenizer_config.json");
  ChatTemplate tmpl(tokenizer.chat_template());
  nlohmann::json extra = {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
  return tmpl.render(messages, add_generation_prompt, extra);
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool add_generation_prompt) {
  return tokenizer.encode(render_chat(tokenizer, messages, add_generation_prompt), false);
}

}  // namespace dsinfer
