// RequestState: sample (or take the backend's sampled token) -> detokenize -> stop-check for one step of one
// request (the generate() loop body).
#include "engine/request_state.h"

#include "core/error.h"

namespace dsinfer {

RequestState::RequestState(uint64_t id, GenerationRequest request, const Tokenizer* tokenizer,
                           std::vector<int32_t> eos_token_ids, int64_t context, Clock::time_point arrival,
                           std::shared_ptr<const TokenTrie> json_vocab, int32_t vocab)
    : id_(id),
      request_(std::move(request)),
      tokenizer_(tokenizer),
      context_(context),
      sampler_(request_.sampling, request_.prompt_ids),
      stops_(request_.sampling, eos_token_ids),
      arrival_(arrival) {
  if (tokenizer_) detok_.emplace(*tokenizer_, /*skip_special_tokens=*/true);
  if (request_.sampling.prompt_logprobs >= 0 && request_.prompt_ids.size() > 1) {
    prompt_scores_.resize(request_.prompt_ids.size() - 1);
    prompt_scored_.assign(request_.prompt_ids.size() - 1, false);
  }
  if (request_.sampling.json_object) {
    DSI_CHECK(tokenizer_ && json_vocab && vocab > 0,
              "response_format json_object needs the model's tokenizer");
    DSI_CHECK(!eos_token_ids.empty(), "response_format json_object needs an end-of-sequence token");
    json_.emplace(std::move(json_vocab), *tokenizer_, vocab, std::move(eos_token_ids),
                  request_.sampling.json_schema);
  } else if (request_.sampling.json_tool_arguments) {
    DSI_CHECK(tokenizer_ && json_vocab && vocab > 0, "JSON tool arguments need the model's tokenizer");
    using Start = ToolArgumentsConstraint::Start;
    const int32_t start = request_.sampling.tool_arguments_start;
    tool_args_.emplace(std::move(json_vocab), *tokenizer_, vocab,
                       start == 2   ? Start::kArguments
                       : start == 1 ? Start::kInCall
                                    : Start::kFree,
                       request_.sampling.tool_schemas, request_.sampling.tool_arguments_function,
                       request_.sampling.tool_arguments_bare);
  }
}

void RequestState::on_scheduled(Clock::time_point now) {
  if (first_scheduled_ == Clock::time_point{}) first_scheduled_ = now;
}

RequestEvent RequestState::base_event() const {
  RequestEvent e;
  e.request_id = id_;
  e.arrival = arrival_;
  e.first_scheduled = first_scheduled_;
  e.first_token = first_token_;
  return e;
}

Usage RequestState::usage(int32_t cached_tokens) const {
  Usage u;
  u.prompt_tokens = static_cast<int32_t>(request_.prompt_ids.size());
  u.completion_tokens = completion_tokens_;
  u.cached_tokens = cached_tokens;
  return u;
}

RequestEvent RequestState::on_logits(const float* logits, int32_t vocab, int64_t sequence_tokens,
                                     int32_t cached_tokens) {
  SampledToken sampled;
  sampled.token = sampler_.sample(logits, vocab, allowed_tokens());
  if (request_.sampling.logprobs > 0) {
    sampled.logprob = Sampler::logprob_of(logits, vocab, sampled.token);
    sampled.top = Sampler::top_logprobs(logits, vocab, request_.sampling.logprobs);
  }
  return on_token(sampled, sequence_tokens, cached_tokens);
}

void RequestState::on_prompt_logprob(int32_t position, const SampledToken& scored) {
  DSI_CHECK(position >= 0 && static_cast<size_t>(position) < prompt_scores_.size(), "request ", id_,
            ": no prompt score at position ", position);
  DSI_CHECK(scored.error.empty(), scored.error);
  if (prompt_scores_sent_ || prompt_scored_[position]) return;
  DSI_CHECK(scored.token == request_.prompt_ids[position + 1], "request ", id_, ": position ", position,
            " scored token ", scored.token, ", not the prompt's ", request_.prompt_ids[position + 1]);
  TokenLogprob& lp = prompt_scores_[position];
  lp.token = scored.token;
  lp.logprob = scored.logprob;
  lp.top = scored.top;
  if (lp.top.size() > static_cast<size_t>(request_.sampling.prompt_logprobs))
    lp.top.resize(request_.sampling.prompt_logprobs);
  prompt_scored_[position] = true;
}

std::vector<TokenLogprob> RequestState::take_prompt_scores() {
  if (prompt_scores_sent_ || request_.sampling.prompt_logprobs < 0) return {};
  prompt_scores_sent_ = true;
  for (size_t p = 0; p < prompt_scored_.size(); ++p)
    DSI_CHECK(prompt_scored_[p], "request ", id_, ": prompt position ", p, " was not scored");
  return std::move(prompt_scores_);
}

RequestEvent RequestState::on_token(const SampledToken& sampled, int64_t sequence_tokens,
                                    int32_t cached_tokens) {
  DSI_CHECK(sampled.error.empty(), sampled.error);
  if (request_.sampling.max_tokens == 0) {  // the prompt is scored, nothing generated: the token is dropped
    finished_ = true;
    RequestEvent e = base_event();
    e.prompt_logprobs = take_prompt_scores();
    e.finished = true;
    e.finish_reason = FinishReason::kLength;
    e.usage = usage(cached_tokens);
    return e;
  }
  const int32_t token = sampled.token;
  if (json_) json_->advance(token);
  if (tool_args_) tool_args_->advance(token);
  sampler_.accept(token);
  last_token_ = token;
  ++completion_tokens_;
  if (first_token_ == Clock::time_point{}) first_token_ = Clock::now();
  RequestEvent e = base_event();
  e.prompt_logprobs = take_prompt_scores();
  e.token_ids.push_back(token);
  if (request_.sampling.logprobs > 0) {
    TokenLogprob lp;
    lp.token = token;
    lp.logprob = sampled.logprob;
    lp.top = sampled.top;
    e.logprobs.push_back(std::move(lp));
  }
  std::string delta = detok_ && token < tokenizer_->vocab_size() ? detok_->push(token) : std::string();
  StopUpdate update = stops_.on_token(token, delta);
  e.text = std::move(update.text);
  FinishReason reason = update.reason;
  if (reason == FinishReason::kNone && sequence_tokens + 1 >= context_) {  // no room for the next cache row
    e.text += stops_.finish();
    reason = FinishReason::kLength;
  }
  // A length stop may leave the bytes of an incomplete character: decode shows them as U+FFFD.
  if (reason == FinishReason::kLength && detok_) e.text += detok_->flush();
  if (reason != FinishReason::kNone) {
    finished_ = true;
    e.finished = true;
    e.finish_reason = reason;
  }
  e.usage = usage(cached_tokens);
  return e;
}

RequestEvent RequestState::abort_event(const std::string& error, int32_t cached_tokens) {
  finished_ = true;
  RequestEvent e = base_event();
  e.finished = true;
  e.finish_reason = FinishReason::kAbort;
  e.error = error;
  e.usage = usage(cached_tokens);
  return e;
}

void RequestState::deliver(const RequestEvent& event) const {
  if (request_.on_event) request_.on_event(event);
}

}  // namespace dsinfer
