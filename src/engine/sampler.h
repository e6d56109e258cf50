// Sampler: one request's token sampling state (seed and RNG, the token lists its penalties count) and the
// logits -> token pipeline of HostSampler over it. The state is kept here on the host; each step hands it
// to a backend as a SamplingRow.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/host_sampling.h"
#include "backend/sampling_row.h"
#include "engine/sampling_params.h"

namespace dsinfer {

class Sampler {
 public:
  // `params` should already be validated; the prompt ids feed the repetition penalty.
  Sampler(SamplingParams params, std::span<const int32_t> prompt_ids);

  // Picks the next token from raw logits[0, vocab) (HostSampler::sample over row()), among `allowed` when it
  // is not empty (SamplingRow::allowed). Does not record the token: call accept() with the token that is
  // actually appended.
  int32_t sample(const float* logits, int32_t vocab, std::span<const uint32_t> allowed = {});

  // This request's parameters and state for Backend::sample. It borrows this Sampler's token lists and
  // RNG: valid until the next accept().
  SamplingRow row();

  // Records a generated token for the presence/frequency/repetition penalties and the draw count.
  void accept(int32_t token);

  // Applies the repetition, presence and frequency penalties, then logit_bias, to logits[0, vocab) in place.
  void apply_penalties(float* logits, int32_t vocab) const;

  // The n most likely tokens under log-softmax of the raw logits, best first (ties: lowest id first).
  static std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t vocab, int32_t n) {
    return HostSampler::top_logprobs(logits, vocab, n);
  }
  // log-softmax of the raw logits at `token`.
  static float logprob_of(const float* logits, int32_t vocab, int32_t token) {
    return HostSampler::logprob_of(logits, vocab, token);
  }

  const SamplingParams& params() const { return params_; }
  // The seed in use (drawn from std::random_device when the request gave none).
  uint64_t seed() const { return seed_; }
  int32_t num_generated() const { return num_generated_; }

 private:
  SamplingRow row_view() const;  // row() without the RNG pointer

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;               // prompt + generated tokens (repetition penalty)
  std::vector<int32_t> seen_list_;                 // the same ids in first-seen order
  std::unordered_map<int32_t, size_t> generated_;  // generated token -> index in generated_ids_
  std::vector<int32_t> generated_ids_, generated_counts_;
  int32_t num_generated_ = 0;
  HostSampler host_;
};

}  // namespace dsinfer
