// SamplingRow / SampledToken: the per-row input and output of Backend::sample (one row of logits per
// sampled request). The request's state (seed, draw count, RNG, penalty token lists) lives on the host in
// its Sampler and is passed in for each step; a row only borrows it.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer {

struct SamplingRow {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;        // the request's seed
  uint64_t draw_index = 0;  // tokens the request sampled before this one (counter-based RNGs start there)
  // The request's host RNG, advanced by the host sampler (the CUDA backend uses seed + draw_index instead).
  std::mt19937_64* host_rng = nullptr;
  std::span<const int32_t> seen_tokens;       // distinct prompt + generated ids: repetition penalty
  std::span<const int32_t> generated_tokens;  // distinct generated ids: presence / frequency penalties
  std::span<const int32_t> generated_counts;  // how often each of generated_tokens was generated
  std::span<const int32_t> bias_ids;          // logit_bias: distinct ids, biased after the penalties
  std::span<const float> bias_values;         // by these amounts
  // Constrained decoding: bit t of allowed[t / 32] says token t may be sampled (the others' logits become
  // -inf after the penalties and biases); empty: every token.
  std::span<const uint32_t> allowed;
  int32_t logprobs = 0;  // > 0: report the chosen token's logprob and the top `logprobs` alternatives
  // >= 0: nothing is drawn, this token is the row's result (scoring a known token: prompt logprobs); the
  // row's logits are still checked (NaN, +inf, all -inf) and its logprobs reported at this token.
  int32_t forced_token = -1;

  bool has_penalties() const {
    return (repetition_penalty != 1.0f && !seen_tokens.empty()) ||
           ((presence_penalty != 0.0f || frequency_penalty != 0.0f) && !generated_tokens.empty()) ||
           !bias_ids.empty() || !allowed.empty();
  }
};

struct SampledToken {
  int32_t token = -1;
  // With SamplingRow::logprobs > 0: log-softmax of the raw logits (before penalties and temperature) at
  // `token`, and the `logprobs` most likely tokens, best first (ties: lowest id first).
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  std::string error;  // non-empty: this row could not be sampled (e.g. NaN logits); token is -1
};

}  // namespace dsinfer
