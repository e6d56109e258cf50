// Per-request sampling and stopping parameters (OpenAI/vLLM-style) and their validation.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer {

class JsonSchema;  // engine/json_schema.h

struct SamplingParams {
  // Largest accepted `logprobs` (the OpenAI API allows up to 20 top logprobs per token).
  static constexpr int32_t kMaxLogprobs = 20;
  // Stop conditions are checked against every generated token of every choice: bounded so that one request
  // cannot stall the engine thread or fill memory (OpenAI itself allows 4 stop strings).
  static constexpr size_t kMaxStopStrings = 16;
  static constexpr size_t kMaxStopStringBytes = 256;
  static constexpr size_t kMaxStopTokenIds = 64;
  // logit_bias: at most this many tokens (OpenAI's limit), each biased by a value in [-100, 100].
  static constexpr size_t kMaxLogitBias = 300;
  static constexpr float kMaxLogitBiasValue = 100.0f;

  float temperature = 1.0f;             // >= 0; 0 => greedy (argmax, lowest id on ties)
  int32_t top_k = 0;                    // <= 0 disables; values above the vocabulary size keep everything
  float top_p = 1.0f;                   // (0, 1]
  float min_p = 0.0f;                   // [0, 1], relative to the most likely token's probability
  float repetition_penalty = 1.0f;      // > 0; HF/CTRL semantics over prompt + generated tokens:
                                        // logit > 0 ? logit / p : logit * p
  float presence_penalty = 0.0f;        // [-2, 2] OpenAI semantics over generated tokens: logit -= presence
  float frequency_penalty = 0.0f;       // [-2, 2]: logit -= frequency * count
  std::optional<uint64_t> seed;         // same seed + same inputs => same tokens
  int32_t max_tokens = 16;              // >= 1 (>= 0 with prompt_logprobs: 0 scores the prompt only)
  std::vector<std::string> stop;        // stop strings (not in the output): <= kMaxStopStrings, each
                                        // non-empty and <= kMaxStopStringBytes
  std::vector<int32_t> stop_token_ids;  // <= kMaxStopTokenIds, each in [0, vocab_size)
  bool ignore_eos = false;
  int32_t logprobs = 0;  // number of top logprobs to return per token, [0, kMaxLogprobs] (0 = none)
  // >= 0: also score the prompt (completions' echo with logprobs): the logprob of each prompt token after the
  // first given the tokens before it, with this many top alternatives, [-1, kMaxLogprobs] (-1 = off). The
  // prompt is then computed in full (no prefix-cache reuse) and its scores come with the first event.
  int32_t prompt_logprobs = -1;
  // logit_bias (OpenAI): logit_bias_values[i] is added to the logit of logit_bias_ids[i] after the penalties
  // (-100 in effect bans a token, 100 in effect forces it). Distinct ids in [0, vocab_size), finite values in
  // [-kMaxLogitBiasValue, kMaxLogitBiasValue], at most kMaxLogitBias; reported logprobs stay the raw model's.
  std::vector<int32_t> logit_bias_ids;
  std::vector<float> logit_bias_values;
  // response_format json_object: the answer is one JSON object and then an end-of-sequence token (only
  // tokens that continue a valid prefix are sampled). Not with ignore_eos.
  bool json_object = false;
  // response_format json_schema (with json_object set): the answer is one value of this schema instead (any
  // top-level type the schema allows), compiled by JsonSchema::compile.
  std::shared_ptr<const JsonSchema> json_schema;
  // DeepSeek-V3 tool calls: each call's arguments (after <｜tool▁call▁begin｜> ... "```json\n", or V3.1's
  // <｜tool▁sep｜>) must be one JSON object; the rest of the answer is free. tool_arguments_start says where
  // the prompt left the answer: 0 free text, 1 inside a call before its arguments, 2 at the arguments. Not
  // with json_object.
  bool json_tool_arguments = false;
  int32_t tool_arguments_start = 0;
  // With json_tool_arguments: the functions whose parameters are held to their schema (compiled with
  // JsonSchema::compile(..., object_root = true)); calls to others get any JSON object. At start 2, the
  // function whose arguments the prompt opened.
  std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>> tool_schemas;
  std::string tool_arguments_function;
  bool tool_arguments_bare = false;  // DeepSeek-V3.1's layout: the arguments right after <｜tool▁sep｜>

  // Throws dsinfer::Error naming the bad field, its value and its allowed range.
  void validate(int32_t vocab_size) const;
};

}  // namespace dsinfer
