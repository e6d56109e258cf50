// Sampler: one request's token sampling state (penalty counts, RNG) and the logits -> token pipeline.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace dsinfer {

class Sampler {
 public:
  // `params` should already be validated; the prompt ids feed the repetition penalty.
  Sampler(SamplingParams params, std::span<const int32_t> prompt_ids);

  // Picks the next token from raw logits[0, vocab). Order: repetition penalty, presence/frequency
  // penalties, then greedy argmax (temperature 0) or temperature, top-k, top-p, min-p and a draw from the
  // renormalised distribution with this request's RNG. O(vocab) plus O(k log k) for the kept candidates.
  // Does not record the token: call accept() with the token that is actually appended.
  int32_t sample(const float* logits, int32_t vocab);

  // Records a generated token for the presence/frequency/repetition penalties.
  void accept(int32_t token);

  // Applies the repetition, presence and frequency penalties to logits[0, vocab) in place.
  void apply_penalties(float* logits, int32_t vocab) const;

  // The n most likely tokens under log-softmax of the raw logits, best first (ties: lowest id first).
  static std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t vocab, int32_t n);
  // log-softmax of the raw logits at `token`.
  static float logprob_of(const float* logits, int32_t vocab, int32_t token);

  const SamplingParams& params() const { return params_; }
  // The seed in use (drawn from std::random_device when the request gave none).
  uint64_t seed() const { return seed_; }
  int32_t num_generated() const { return num_generated_; }

 private:
  struct Candidate {
    int32_t id;
    float weight;  // exp((penalised logit - max) / temperature), in (0, 1]
  };

  // Candidate order: higher weight first, lower id on ties (makes every selection deterministic).
  static bool better(const Candidate& a, const Candidate& b) {
    return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
  }
  // Keeps the smallest best-first prefix of candidates_ whose probability mass reaches top_p.
  void keep_top_p(float top_p);
  // Draws one candidate in proportion to its weight with rng_.
  int32_t draw();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;                // prompt + generated tokens (repetition penalty)
  std::unordered_map<int32_t, int32_t> generated_;  // generated token -> count (presence/frequency)
  int32_t num_generated_ = 0;
  std::vector<float> work_;            // penalised logits
  std::vector<Candidate> candidates_;  // surviving tokens
};

}  // namespace dsinfer
