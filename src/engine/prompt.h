// Prompt construction for the CLI and server: plain text (BOS as tokenizer_config.json says) or chat
// messages rendered with the model's chat template.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsinfer {

// ids of a plain-text prompt; throws on an empty prompt or invalid UTF-8.
std::vector<int32_t> encode_text_prompt(const Tokenizer& tokenizer, const std::string& text);

// The chat template's rendering of `messages` (a JSON array of {role, content, tool_calls?}); `variables`
// adds template variables (e.g. tools). Throws when the template leaves out a message's content or an
// assistant message's tool call (a role or field it does not handle): nothing the caller sent is dropped
// silently.
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        bool add_generation_prompt,
                        const nlohmann::json& variables = nlohmann::json::object());

// ids of the rendered chat followed by `suffix` (special tokens in both are matched, nothing else is added).
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool add_generation_prompt = true,
                                        const nlohmann::json& variables = nlohmann::json::object(),
                                        const std::string& suffix = "");

// Checks that `messages` is an array of objects with string "role" and string "content" fields.
void validate_messages(const nlohmann::json& messages);

}  // namespace dsinfer
