// RequestState: the engine's per-request generation state (Sampler, IncrementalDetokenizer, StopChecker,
// event callback, usage and timing). Turns the logits (or the sampled token) of each step into the request's
// next event.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "dsinfer/engine.h"
#include "engine/json_constraint.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

class RequestState {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokenizer` may be null (models without one: text deltas stay empty). `context` is the model's
  // maximum sequence length. A json_object request needs `json_vocab` (the tokenizer's trie) and `vocab`
  // (the model's logits width).
  RequestState(uint64_t id, GenerationRequest request, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_token_ids, int64_t context, Clock::time_point arrival,
               std::shared_ptr<const TokenTrie> json_vocab = nullptr, int32_t vocab = 0);

  uint64_t id() const { return id_; }
  Clock::time_point arrival() const { return arrival_; }
  const GenerationRequest& request() const { return request_; }

  // The request was scheduled (first time only recorded).
  void on_scheduled(Clock::time_point now);
  // Samples the next token from logits[0, vocab) of a sequence that now holds `sequence_tokens` tokens
  // (prompt + generated, before this token) and returns the event to deliver (finished when it ends).
  // (= HostSampler on the request's row, then on_token.)
  RequestEvent on_logits(const float* logits, int32_t vocab, int64_t sequence_tokens, int32_t cached_tokens);
  // The request's sampling parameters and state for Backend::sample (valid until the next on_token).
  SamplingRow sampling_row() {
    SamplingRow row = sampler_.row();
    row.allowed = allowed_tokens();
    return row;
  }
  // Handles a token a backend sampled for this request (with its logprobs when the request asked for
  // them): records it, detokenizes, checks stops and returns the event to deliver. Throws when
  // `sampled.error` is set.
  RequestEvent on_token(const SampledToken& sampled, int64_t sequence_tokens, int32_t cached_tokens);
  // Records the score of prompt token position + 1 (SamplingParams::prompt_logprobs; a forced row's result);
  // the first event carries them all. A position scored again (a recompute) keeps its first score. Throws
  // when `scored.error` is set.
  void on_prompt_logprob(int32_t position, const SampledToken& scored);
  // A final event for a request that ends without a token (cancellation, failure, shutdown).
  RequestEvent abort_event(const std::string& error, int32_t cached_tokens);
  // Delivers an event through the request's callback (no-op without one).
  void deliver(const RequestEvent& event) const;

  // Whether the next token certainly ends the request (its max_tokens, or no cache row after it) in a
  // sequence of `sequence_tokens` tokens before it: async scheduling then computes no row for it.
  bool next_token_is_last(int64_t sequence_tokens) const {
    return completion_tokens_ + 1 >= request_.sampling.max_tokens || sequence_tokens + 1 >= context_;
  }
  bool finished() const { return finished_; }
  int32_t last_token() const { return last_token_; }

 private:
  RequestEvent base_event() const;
  // The constraint's allowed tokens for the next one (empty: any).
  std::span<const uint32_t> allowed_tokens() {
    if (json_) return json_->allowed();
    if (tool_args_) return tool_args_->allowed();
    return {};
  }
  Usage usage(int32_t cached_tokens) const;
  // The prompt's scores for the first event (all positions scored by then), once.
  std::vector<TokenLogprob> take_prompt_scores();

  uint64_t id_;
  GenerationRequest request_;
  const Tokenizer* tokenizer_;
  int64_t context_;
  Sampler sampler_;
  std::optional<JsonConstraint> json_;                // response_format json_object / json_schema
  std::optional<ToolArgumentsConstraint> tool_args_;  // tool calls' arguments as JSON
  StopChecker stops_;
  std::optional<IncrementalDetokenizer> detok_;
  std::vector<TokenLogprob> prompt_scores_;  // [prompt_len - 1] with prompt_logprobs
  std::vector<bool> prompt_scored_;          // which of prompt_scores_ are in
  bool prompt_scores_sent_ = false;
  int32_t completion_tokens_ = 0;
  int32_t last_token_ = -1;
  bool finished_ = false;
  Clock::time_point arrival_, first_scheduled_{}, first_token_{};
};

}  // namespace dsinfer
