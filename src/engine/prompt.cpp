// Prompt encoding and chat rendering.
#include "engine/prompt.h"

#include <string>
#include <vector>

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

namespace {

// The text that stands in for message i's content when checking that the template renders it.
std::string message_marker(size_t i) {
  return str_cat("[[dsinfer:message:", i, "]]");
}

// A template renders only the roles and fields it knows: a message it skips (a role it does not handle, such
// as "wizard" in DeepSeek's templates) would be lost without a word. Renders once with every non-empty string
// content replaced by a marker and refuses the messages whose marker is missing from the result.
void check_every_message_rendered(const ChatTemplate& tmpl, const nlohmann::json& messages,
                                  bool add_generation_prompt, const nlohmann::json& extra) {
  nlohmann::json marked = messages;
  std::vector<size_t> checked;
  for (size_t i = 0; i < marked.size(); ++i) {
    const nlohmann::json& content = marked[i].value("content", nlohmann::json());
    if (!content.is_string() || content.get<std::string>().empty()) continue;
    marked[i]["content"] = message_marker(i);
    checked.push_back(i);
  }
  if (checked.empty()) return;
  const std::string rendered = tmpl.render(marked, add_generation_prompt, extra);
  for (size_t i : checked) {
    DSI_CHECK(rendered.find(message_marker(i)) != std::string::npos, "messages[", i, "] (role '",
              messages[i]["role"].get<std::string>(),
              "') is not in the chat template's rendering: the model's template does not handle this role");
  }
}

}  // namespace

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        bool add_generation_prompt) {
  validate_messages(messages);
  DSI_CHECK(!tokenizer.chat_template().empty(), "the model has no chat_template in tokenizer_config.json");
  ChatTemplate tmpl(tokenizer.chat_template());
  nlohmann::json extra = {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
  check_every_message_rendered(tmpl, messages, add_generation_prompt, extra);
  return tmpl.render(messages, add_generation_prompt, extra);
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool add_generation_prompt) {
  return tokenizer.encode(render_chat(tokenizer, messages, add_generation_prompt), false);
}

}  // namespace dsinfer
