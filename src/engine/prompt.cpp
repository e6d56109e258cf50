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

// The text that stands in for the arguments of message i's tool call j.
std::string call_marker(size_t i, size_t j) {
  return str_cat("[[dsinfer:message:", i, ":call:", j, "]]");
}

// A template renders only the roles and fields it knows: a message it skips (a role it does not handle, such
// as "wizard" in DeepSeek's templates) would be lost without a word. Renders once with every non-empty string
// content and every tool call's arguments replaced by a marker and refuses the messages whose marker is
// missing from the result.
void check_every_message_rendered(const ChatTemplate& tmpl, const nlohmann::json& messages,
                                  bool add_generation_prompt, const nlohmann::json& extra) {
  nlohmann::json marked = messages;
  std::vector<std::pair<std::string, std::string>> expected;  // marker, what is missing when it is absent
  for (size_t i = 0; i < marked.size(); ++i) {
    const std::string role = messages[i]["role"].get<std::string>();
    const nlohmann::json& content = marked[i].value("content", nlohmann::json());
    if (content.is_string() && !content.get<std::string>().empty()) {
      marked[i]["content"] = message_marker(i);
      expected.emplace_back(message_marker(i), str_cat("messages[", i, "] (role '", role, "')"));
    }
    nlohmann::json& calls = marked[i]["tool_calls"];
    if (!calls.is_array()) {
      if (calls.is_null()) marked[i].erase("tool_calls");
      continue;
    }
    for (size_t j = 0; j < calls.size(); ++j) {
      nlohmann::json& fn = calls[j]["function"];
      if (!fn.is_object()) continue;
      fn["arguments"] = call_marker(i, j);
      expected.emplace_back(call_marker(i, j), str_cat("messages[", i, "].tool_calls[", j, "] (role '", role,
                                                       "'", content.is_null() ? "" : ", with content", ")"));
    }
  }
  if (expected.empty()) return;
  const std::string rendered = tmpl.render(marked, add_generation_prompt, extra);
  for (const auto& [marker, what] : expected) {
    DSI_CHECK(rendered.find(marker) != std::string::npos, what,
              " is not in the chat template's rendering: the model's template does not handle it");
  }
}

}  // namespace

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        bool add_generation_prompt, const nlohmann::json& variables) {
  validate_messages(messages);
  DSI_CHECK(!tokenizer.chat_template().empty(), "the model has no chat_template in tokenizer_config.json");
  ChatTemplate tmpl(tokenizer.chat_template());
  DSI_CHECK(variables.is_object(), "chat template variables must be a JSON object");
  nlohmann::json extra = variables;
  extra["bos_token"] = tokenizer.bos_token();
  extra["eos_token"] = tokenizer.eos_token();
  check_every_message_rendered(tmpl, messages, add_generation_prompt, extra);
  return tmpl.render(messages, add_generation_prompt, extra);
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool add_generation_prompt, const nlohmann::json& variables,
                                        const std::string& suffix) {
  return tokenizer.encode(render_chat(tokenizer, messages, add_generation_prompt, variables) + suffix, false);
}

}  // namespace dsinfer
