// Per-request sampling and stopping parameters (OpenAI/vLLM-style) and their validation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsinfer {

struct SamplingParams {
  // Largest accepted `logprobs` (the OpenAI API allows up to 20 top logprobs per token).
  static constexpr int32_t kMaxLogprobs = 20;
  // Stop conditions are checked against every generated token of every choice: bounded so that one request
  // cannot stall the engine thread or fill memory (OpenAI itself allows 4 stop strings).
  static constexpr size_t kMaxStopStrings = 16;
  static constexpr size_t kMaxStopStringBytes = 256;
  static constexpr size_t kMaxStopTokenIds = 64;

  float temperature = 1.0f;             // >= 0; 0 => greedy (argmax, lowest id on ties)
  int32_t top_k = 0;                    // <= 0 disables; values above the vocabulary size keep everything
  float top_p = 1.0f;                   // (0, 1]
  float min_p = 0.0f;                   // [0, 1], relative to the most likely token's probability
  float repetition_penalty = 1.0f;      // > 0; HF/CTRL semantics over prompt + generated tokens:
                                        // logit > 0 ? logit / p : logit * p
  float presence_penalty = 0.0f;        // [-2, 2] OpenAI semantics over generated tokens: logit -= presence
  float frequency_penalty = 0.0f;       // [-2, 2]: logit -= frequency * count
  std::optional<uint64_t> seed;         // same seed + same inputs => same tokens
  int32_t max_tokens = 16;              // >= 1
  std::vector<std::string> stop;        // stop strings (not in the output): <= kMaxStopStrings, each
                                        // non-empty and <= kMaxStopStringBytes
  std::vector<int32_t> stop_token_ids;  // <= kMaxStopTokenIds, each in [0, vocab_size)
  bool ignore_eos = false;
  int32_t logprobs = 0;  // number of top logprobs to return per token, [0, kMaxLogprobs] (0 = none)

  // Throws dsinfer::Error naming the bad field, its value and its allowed range.
  void validate(int32_t vocab_size) const;
};

}  // namespace dsinfer
