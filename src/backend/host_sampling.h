// The host sampling pipeline for one row of logits (the reference semantics every backend follows):
// penalties -> greedy argmax, or temperature -> top-k -> top-p -> min-p -> draw from the row's host RNG.
// Used by Sampler (engine) and by the default Backend::sample.
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "backend/sampling_row.h"

namespace dsinfer {

class HostSampler {
 public:
  // Picks the next token from raw logits[0, vocab). Order: repetition penalty, presence/frequency
  // penalties, then greedy argmax (temperature 0) or temperature, top-k, top-p, min-p and a draw from the
  // renormalised distribution with `rng`. O(vocab) plus O(k log k) for the kept candidates.
  int32_t sample(const float* logits, int32_t vocab, const SamplingRow& row, std::mt19937_64& rng);
  // sample() with row.host_rng (or row.forced_token, without a draw) plus the logprobs the row asks for;
  // failures (NaN logits, penalty ids outside the vocabulary) land in SampledToken::error instead of
  // throwing.
  SampledToken sample_row(const float* logits, int32_t vocab, const SamplingRow& row);

  // Applies the repetition, presence and frequency penalties of `row` to logits[0, vocab) in place.
  static void apply_penalties(float* logits, int32_t vocab, const SamplingRow& row);
  // The n most likely tokens under log-softmax of the raw logits, best first (ties: lowest id first).
  static std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t vocab, int32_t n);
  // log-softmax of the raw logits at `token`.
  static float logprob_of(const float* logits, int32_t vocab, int32_t token);

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
  // Draws one candidate in proportion to its weight with `rng`.
  int32_t draw(std::mt19937_64& rng) const;

  std::vector<float> work_;            // penalised logits
  std::vector<Candidate> candidates_;  // surviving tokens
};

}  // namespace dsinfer
