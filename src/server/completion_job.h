// One /v1/completions or /v1/chat/completions request in flight: submits prompts x n engine requests,
// gathers their events (posted to the I/O thread), streams SSE chunks or answers once all choices finish,
// cancels everything when the client disconnects or the request times out, and records metrics + a log line.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http_types.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/reasoning_parser.h"
#include "server/server_context.h"
#include "server/tool_call_parser.h"

namespace dsinfer::server {

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(ServerContext& ctx, CompletionRequest request, std::shared_ptr<Responder> out,
                std::chrono::steady_clock::time_point arrival);
  // Submits every choice (I/O thread). Throws ApiError when the first submission is refused; later
  // refusals cancel the submitted ones and answer with the error.
  void start();
  // Cancels every unfinished engine request (client gone, timeout, shutdown).
  void cancel_all(const std::string& why);

 private:
  using Clock = std::chrono::steady_clock;
  struct Choice {
    int32_t index = 0;
    size_t prompt = 0;
    uint64_t engine_id = 0;
    bool submitted = false;
    bool finished = false;
    bool role_sent = false;
    bool echo_sent = false;  // completions with echo: the prompt's text went out (streaming)
    std::vector<TokenLogprob> logprobs;
    // Completions with echo and logprobs: the prompt's tokens with their scores (the first unscored), from
    // the choice's first event. `scores`: its engine request scores the prompt (else it takes its prompt's
    // first candidate's at the end); `untexted`: 1 when the prompt's first token is not in its echoed text
    // (a BOS the tokenizer added).
    std::vector<TokenLogprob> prompt_logprobs;
    bool scores = false;
    bool prompt_scored = false;
    size_t untexted = 0;
    // Chat: the answer read for thinking and, with tools, for calls as it arrives. content is the text
    // outside both (all of it without parsers).
    std::optional<ReasoningParser> reasoning_parser;
    std::optional<ToolCallParser> tool_parser;
    std::string content;
    std::string reasoning;
    std::vector<ToolCallOutput> calls;
    std::string finish_reason;
    std::string error;
    int32_t completion_tokens = 0;
    int32_t cached_tokens = 0;
    size_t text_offset = 0;
    double queue_delay = -1.0;
  };

  // Engine requests per prompt: best_of when it asks for more than n, else n; ranked(): best_of > n.
  int32_t candidates() const { return req_.best_of > req_.n ? req_.best_of : req_.n; }
  bool ranked() const { return req_.best_of > req_.n; }
  // The choices the answer holds, in order: every one, or per prompt the n best candidates.
  std::vector<const Choice*> returned_choices() const;
  static double mean_logprob(const Choice& c);
  // Completions with echo and logprobs: the prompt's logprobs entries (its first token, then the engine's
  // scores) and the choice's output logprobs led by them.
  bool scores_prompt() const { return req_.sampling.prompt_logprobs >= 0; }
  std::vector<TokenLogprob> prompt_entries(const Choice& c, const RequestEvent& first) const;
  // o's logprobs: `prompt` (the echoed prompt's entries, or none) then `rest`.
  static void set_logprobs(ChoiceOutput& o, std::vector<TokenLogprob> prompt, size_t untexted,
                           const std::vector<TokenLogprob>& rest);

  void on_event(size_t choice, const RequestEvent& event);
  // The event's share of the answer: its text, or with the parsers the content, thinking and calls that
  // became final.
  struct Delta {
    std::string text;
    std::string reasoning;
    std::vector<ToolCallOutput> calls;
  };
  Delta take_delta(Choice& c, const RequestEvent& event);
  // Streams the event's delta; prompt_logprobs (the choice's first event, echo with logprobs) lead its
  // logprobs.
  void stream_delta(Choice& c, const RequestEvent& event, Delta delta,
                    std::vector<TokenLogprob> prompt_logprobs);
  void complete();
  void fail_stream(const std::string& message);

  ServerContext& ctx_;
  CompletionRequest req_;
  std::shared_ptr<Responder> out_;
  ResponseHeader header_;
  uint64_t job_number_ = 0;
  std::vector<Choice> choices_;
  size_t remaining_ = 0;
  Clock::time_point arrival_;
  Clock::time_point first_token_{};
  bool started_stream_ = false;
  bool done_ = false;
  bool disconnected_ = false;
  bool timed_out_ = false;
  bool shutting_down_ = false;
  std::function<void()> cancel_timer_;
};

}  // namespace dsinfer::server
