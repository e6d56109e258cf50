// Parsing and validation of OpenAI /v1/completions and /v1/chat/completions request bodies into prompts
// (token ids) and SamplingParams. Every rejection is an ApiError naming the offending field.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/tool_request.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;  // one for chat; one per prompt for completions
  SamplingParams sampling;
  int32_t n = 1;
  // Completions: candidates generated per prompt when more than n (`best_of`); the n with the highest mean
  // log probability per token are returned. 0: n.
  int32_t best_of = 0;
  bool stream = false;
  bool include_usage = false;
  // Completions: `logprobs` (top alternatives per token); chat: `top_logprobs` when `logprobs` is true.
  // -1: no logprobs in the response.
  int32_t top_logprobs = -1;
  std::string user;
  // Completions with `echo`: each prompt's text (as sent, or decoded from its ids), written before its
  // choices' text.
  std::vector<std::string> echo_texts;
  // Chat: the tools offered and how the answer is read for calls; the text written after the generation
  // prompt (the opening of a required call), which the answer continues.
  ToolRequest tools;
  std::string tool_prefill;
  // Chat: answers are read for thinking (reasoning_content), which the prompt may already have opened.
  bool reasoning = false;
  bool reasoning_opened = false;
};

struct ModelLimits {
  int32_t vocab_size = 0;
  int64_t max_model_len = 0;  // prompt + generated tokens
};

// The largest accepted `n`.
constexpr int32_t kMaxChoices = 128;

// Parses a JSON body (the raw text: malformed JSON and invalid UTF-8 are rejected here).
nlohmann::json parse_json_body(const std::string& body);

// Throws ApiError (400) for wrong types, missing fields, out-of-range values, unencodable prompts and
// prompt + max_tokens beyond max_model_len. Does not check `model` (the caller knows the served names).
// raw_body: the body's text, for what needs its key order (a json_schema's properties); may be empty.
CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat, const Tokenizer& tokenizer,
                                           const ModelLimits& limits, std::string_view raw_body = {});

// The chat template's inputs for a chat body: the tool additions (tool_prompt) and `chat_template_kwargs`
// (extra template variables, e.g. {"thinking": true} for DeepSeek-V3.1; those the server sets are refused).
ToolPrompt chat_template_inputs(const nlohmann::json& body, const nlohmann::json& messages,
                                const ToolRequest& tools, const Tokenizer& tokenizer);

// Chat messages with OpenAI content parts ([{"type": "text", "text": ...}]) flattened to strings and tool
// calls / tool results checked (normalize_tool_message).
nlohmann::json normalize_messages(const nlohmann::json& messages);

}  // namespace dsinfer::server
