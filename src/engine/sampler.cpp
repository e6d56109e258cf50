// Sampler: per-request penalty token lists, seed and RNG; sampling itself is HostSampler's.
#include "engine/sampler.h"

#include "core/error.h"

namespace dsinfer {
namespace {

uint64_t random_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

}  // namespace

Sampler::Sampler(SamplingParams params, std::span<const int32_t> prompt_ids)
    : params_(std::move(params)), seed_(params_.seed ? *params_.seed : random_seed()), rng_(seed_) {
  for (int32_t id : prompt_ids) {
    DSI_CHECK(id >= 0, "sampler: negative prompt token id ", id);
    if (seen_.insert(id).second) seen_list_.push_back(id);
  }
}

void Sampler::accept(int32_t token) {
  DSI_CHECK(token >= 0, "sampler: negative token id ", token);
  if (seen_.insert(token).second) seen_list_.push_back(token);
  auto [it, inserted] = generated_.try_emplace(token, generated_ids_.size());
  if (inserted) {
    generated_ids_.push_back(token);
    generated_counts_.push_back(0);
  }
  ++generated_counts_[it->second];
  ++num_generated_;
}

SamplingRow Sampler::row_view() const {
  SamplingRow r;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  r.seed = seed_;
  r.draw_index = static_cast<uint64_t>(num_generated_);
  r.seen_tokens = seen_list_;
  r.generated_tokens = generated_ids_;
  r.generated_counts = generated_counts_;
  r.bias_ids = params_.logit_bias_ids;
  r.bias_values = params_.logit_bias_values;
  r.logprobs = params_.logprobs;
  return r;
}

SamplingRow Sampler::row() {
  SamplingRow r = row_view();
  r.host_rng = &rng_;
  return r;
}

void Sampler::apply_penalties(float* logits, int32_t vocab) const {
  HostSampler::apply_penalties(logits, vocab, row_view());
}

int32_t Sampler::sample(const float* logits, int32_t vocab, std::span<const uint32_t> allowed) {
  SamplingRow row = row_view();
  row.allowed = allowed;
  return host_.sample(logits, vocab, row, rng_);
}

}  // namespace dsinfer
