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

// The chat template's rendering of `messages` (a JSON array of {role, content}). Throws when the template
// leaves out a message's content (a role it does not handle): nothing the caller sent is dropped silently.
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        bool add_generation_prompt);

// ids of the rendered chat (special tokens in the rendering are matched, nothing else is added).
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool add_generation_prompt = true);

// Checks that `messages` is an array of objects with string "role" and string "content" fields.
void validate_messages(const nlohmann::json& messages);

}  // namespace dsinfer
