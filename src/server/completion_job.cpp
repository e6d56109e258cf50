// CompletionJob: submission, event handling, streaming, final answer, cancellation and accounting.
#include "server/completion_job.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "resilience/step_error.h"
#include "server/api_error.h"
#include "server/sse.h"

namespace dsinfer::server {

namespace {

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%016llx%08llx", prefix, static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string reason_of(const RequestEvent& ev) {
  const std::string r(to_string(ev.finish_reason));
  if (r == "none") return "";
  return r;
}

// The engine's refusal as an API error: a full queue is 429, a stopping engine 503, anything else 400.
ApiError refusal(const std::string& message) {
  if (message.find("queue") != std::string::npos) {
    return ApiError(429, message, "rate_limit_error", "", "rate_limit_exceeded");
  }
  if (message.find("shutting down") != std::string::npos)
    return ApiError(503, message, "service_unavailable");
  return bad_request(message, "", "invalid_value");
}

}  // namespace

CompletionJob::CompletionJob(ServerContext& ctx, CompletionRequest request, std::shared_ptr<Responder> out,
                             Clock::time_point arrival)
    : ctx_(ctx), req_(std::move(request)), out_(std::move(out)), arrival_(arrival) {
  header_.chat = req_.chat;
  header_.id = random_id(req_.chat ? "chatcmpl" : "cmpl");
  header_.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  header_.model = ctx_.model_name;
  for (size_t p = 0; p < req_.prompts.size(); ++p) {
    for (int32_t i = 0; i < candidates(); ++i) {
      Choice c;
      c.index = static_cast<int32_t>(p * candidates() + i);
      c.prompt = p;
      if (req_.reasoning) c.reasoning_parser.emplace(req_.reasoning_opened);
      if (req_.tools.active()) {
        c.tool_parser.emplace();
        // The prompt ends inside the call it opened: the parser reads the answer from there.
        const ToolParseOutput opened = c.tool_parser->feed(req_.tool_prefill);
        DSI_CHECK(opened.empty(), "the tool-call prefill completed a call or left text");
      }
      choices_.push_back(std::move(c));
    }
  }
}

void CompletionJob::start() {
  Engine* engine = ctx_.engine.load();
  DSI_CHECK(engine != nullptr, "no engine");
  // A request of more choices than the queue holds could never be admitted: not a 429 to retry forever.
  const int64_t limit = ctx_.config.engine.max_queue_length;
  if (static_cast<int64_t>(choices_.size()) > limit) {
    throw bad_request(
        str_cat("this request needs ", choices_.size(), " queue slots (prompts x n) but the server's ",
                "max_queue_length is ", limit, "; send fewer prompts or a smaller 'n'"),
        "n", "invalid_value");
  }
  // Backpressure: refuse rather than queue without bound.
  const EngineStats stats = engine->stats();
  if (stats.waiting + static_cast<int64_t>(choices_.size()) > ctx_.config.engine.max_queue_length) {
    throw ApiError(429,
                   str_cat("the server is overloaded (", stats.waiting, " requests waiting, limit ",
                           ctx_.config.engine.max_queue_length, "); retry later"),
                   "rate_limit_error", "", "rate_limit_exceeded");
  }
  std::weak_ptr<CompletionJob> weak = weak_from_this();
  auto post = ctx_.post;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    GenerationRequest g;
    g.prompt_ids = req_.prompts[c.prompt];
    g.sampling = req_.sampling;
    // echo + logprobs: one candidate per prompt scores it when the answer is whole (the others take its
    // scores at the end, and may reuse its cached blocks); streamed choices each carry theirs in their first
    // chunk, and max_tokens 0 requests are nothing but the scoring.
    c.scores =
        scores_prompt() && (req_.stream || req_.sampling.max_tokens == 0 || c.index % candidates() == 0);
    if (!c.scores) g.sampling.prompt_logprobs = -1;
    // n (or best_of) > 1: distinct seeds derived from the request's seed (unseeded requests already differ).
    if (req_.sampling.seed && candidates() > 1)
      g.sampling.seed = *req_.sampling.seed + static_cast<uint64_t>(c.index % candidates());
    g.on_event = [weak, post, i](const RequestEvent& ev) {
      post([weak, i, ev]() {
        if (auto self = weak.lock()) self->on_event(i, ev);
      });
    };
    try {
      c.engine_id = engine->submit(std::move(g));
      c.submitted = true;
      ++remaining_;
    } catch (const Error& e) {
      ApiError err = refusal(e.what());
      if (i == 0) throw err;
      cancel_all("a later choice was refused");
      // Answer now; the cancelled choices' final events find the job done.
      done_ = true;
      HttpResponse r = error_response(err);
      if (err.status == 429) r.headers.emplace_back("Retry-After", retry_after(ctx_.config.server));
      out_->send(std::move(r));
      return;
    }
  }
  job_number_ = ctx_.next_job++;
  ctx_.jobs[job_number_] = shared_from_this();
  out_->on_disconnect([weak]() {
    if (auto self = weak.lock()) {
      self->disconnected_ = true;
      self->cancel_all("client disconnected");
    }
  });
  if (ctx_.config.server.request_timeout_seconds > 0) {
    cancel_timer_ = ctx_.schedule(ctx_.config.server.request_timeout_seconds, [weak]() {
      if (auto self = weak.lock()) {
        self->timed_out_ = true;
        self->cancel_all("request timeout");
      }
    });
  }
  if (req_.stream) {
    out_->start_stream(200, "text/event-stream");
    started_stream_ = true;
  }
}

void CompletionJob::cancel_all(const std::string& why) {
  if (why == "server shutting down") shutting_down_ = true;
  Engine* engine = ctx_.engine.load();
  if (!engine) return;
  for (Choice& c : choices_) {
    if (c.submitted && !c.finished) engine->cancel(c.engine_id);
  }
  log_debug("request ", header_.id, ": cancelled (", why, ")");
}

void CompletionJob::on_event(size_t index, const RequestEvent& ev) {
  if (done_ || index >= choices_.size()) return;
  Choice& c = choices_[index];
  if (c.finished) return;
  if ((!ev.token_ids.empty() || !ev.text.empty()) && first_token_ == Clock::time_point{})
    first_token_ = Clock::now();
  c.completion_tokens += static_cast<int32_t>(ev.token_ids.size());
  Delta delta = take_delta(c, ev);
  const bool first_scores = c.scores && !c.prompt_scored && ev.error.empty();
  if (first_scores) {
    c.prompt_scored = true;
    c.prompt_logprobs = prompt_entries(c, ev);
    const Tokenizer& tok = ctx_.engine.load()->tokenizer();
    const int32_t first = c.prompt_logprobs.front().token;
    const bool texted =
        first < tok.vocab_size() && req_.echo_texts[c.prompt].rfind(tok.token_bytes(first), 0) == 0;
    c.untexted = texted ? 0 : 1;
  }
  if (req_.top_logprobs >= 0 || ranked())
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (ev.finished) {
    c.finished = true;
    c.finish_reason = reason_of(ev);
    c.error = ev.error;
    if (c.error.empty() && c.finish_reason == "abort") c.error = "aborted";
    if (ev.usage.completion_tokens > 0) c.completion_tokens = ev.usage.completion_tokens;
    c.cached_tokens = ev.usage.cached_tokens;
    if (ev.first_scheduled != Clock::time_point{} && ev.arrival != Clock::time_point{}) {
      c.queue_delay = seconds(ev.first_scheduled - ev.arrival);
    }
    // An answer that called functions and ended by itself asks for their results.
    if (!c.calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  }
  if (req_.stream && !disconnected_ && !out_->disconnected()) {
    stream_delta(c, ev, std::move(delta), first_scores ? c.prompt_logprobs : std::vector<TokenLogprob>{});
  }
  if (ev.finished && --remaining_ == 0) complete();
}

CompletionJob::Delta CompletionJob::take_delta(Choice& c, const RequestEvent& ev) {
  Delta d;
  d.text = ev.text;
  if (c.reasoning_parser) {
    ReasoningOutput r = c.reasoning_parser->feed(d.text);
    if (ev.finished) {
      ReasoningOutput rest = c.reasoning_parser->finish();
      r.reasoning += rest.reasoning;
      r.content += rest.content;
    }
    d.reasoning = std::move(r.reasoning);
    d.text = std::move(r.content);
    c.reasoning += d.reasoning;
  }
  if (c.tool_parser) {
    ToolParseOutput parsed = c.tool_parser->feed(d.text);
    if (ev.finished) {
      ToolParseOutput rest = c.tool_parser->finish();
      parsed.content += rest.content;
      for (ParsedToolCall& call : rest.calls) parsed.calls.push_back(std::move(call));
    }
    d.text = std::move(parsed.content);
    for (ParsedToolCall& call : parsed.calls) {
      if (!req_.tools.parallel && !c.calls.empty()) break;  // parallel_tool_calls false: the first call only
      ToolCallOutput out{static_cast<int32_t>(c.calls.size()), new_tool_call_id(), std::move(call.name),
                         std::move(call.arguments)};
      c.calls.push_back(out);
      d.calls.push_back(std::move(out));
    }
  }
  c.content += d.text;
  return d;
}

std::vector<TokenLogprob> CompletionJob::prompt_entries(const Choice& c, const RequestEvent& first) const {
  std::vector<TokenLogprob> out;
  const std::vector<int32_t>& prompt = req_.prompts[c.prompt];
  TokenLogprob head;  // nothing scores the first token
  head.token = prompt.front();
  out.push_back(std::move(head));
  out.insert(out.end(), first.prompt_logprobs.begin(), first.prompt_logprobs.end());
  return out;
}

void CompletionJob::set_logprobs(ChoiceOutput& o, std::vector<TokenLogprob> prompt, size_t untexted,
                                 const std::vector<TokenLogprob>& rest) {
  o.unscored = prompt.empty() ? 0 : 1;  // nothing scores the prompt's first token
  o.untexted = prompt.empty() ? 0 : untexted;
  o.logprobs = std::move(prompt);
  o.logprobs.insert(o.logprobs.end(), rest.begin(), rest.end());
}

void CompletionJob::stream_delta(Choice& c, const RequestEvent& ev, Delta d,
                                 std::vector<TokenLogprob> prompt_logprobs) {
  const bool cancelled = ev.finished && !c.error.empty();
  if (cancelled) return;  // reported once, in complete()
  if (req_.chat && !c.role_sent) {
    c.role_sent = true;
    ChoiceOutput role{c.index, "", {}, "", {}, {}, 0, 0};
    out_->write_chunk(sse_data(dump(chunk_body(header_, ctx_.engine.load()->tokenizer(), role,
                                               req_.top_logprobs, true, req_.include_usage, 0))));
  }
  if (!req_.echo_texts.empty() && !c.echo_sent) {
    c.echo_sent = true;
    d.text = req_.echo_texts[c.prompt] + d.text;
  }
  if (d.text.empty() && d.reasoning.empty() && d.calls.empty() && ev.logprobs.empty() &&
      prompt_logprobs.empty() && !ev.finished)
    return;
  ChoiceOutput delta{
      c.index, std::move(d.text), {}, ev.finished ? c.finish_reason : "", std::move(d.calls), std::nullopt, 0,
      0};
  if (!d.reasoning.empty()) delta.reasoning = std::move(d.reasoning);
  // The echoed prompt's entries lead the first chunk's (its text leads the chunk's text).
  if (req_.top_logprobs >= 0) set_logprobs(delta, std::move(prompt_logprobs), c.untexted, ev.logprobs);
  const Tokenizer& tok = ctx_.engine.load()->tokenizer();
  out_->write_chunk(sse_data(
      dump(chunk_body(header_, tok, delta, req_.top_logprobs, false, req_.include_usage, c.text_offset))));
  // Counted in token bytes, as within a chunk: a token's bytes may reach the text only with a later one.
  c.text_offset += logprobs_text_bytes(tok, delta.logprobs, delta.untexted);
}

void CompletionJob::fail_stream(const std::string& message) {
  out_->write_chunk(sse_data(dump(error_json(ApiError(500, message, "server_error")))));
  out_->write_chunk(sse_done());
  out_->end_stream();
}

double CompletionJob::mean_logprob(const Choice& c) {
  if (c.logprobs.empty()) return 0.0;
  double sum = 0.0;
  for (const TokenLogprob& t : c.logprobs) sum += t.logprob;
  return sum / static_cast<double>(c.logprobs.size());
}

std::vector<const CompletionJob::Choice*> CompletionJob::returned_choices() const {
  std::vector<const Choice*> out;
  for (size_t p = 0; p < req_.prompts.size(); ++p) {
    std::vector<const Choice*> group;  // prompt p's candidates, in index order
    for (const Choice& c : choices_)
      if (c.prompt == p) group.push_back(&c);
    if (ranked()) {
      // The n best by mean log probability per token; ties keep the lower index.
      std::stable_sort(group.begin(), group.end(),
                       [](const Choice* a, const Choice* b) { return mean_logprob(*a) > mean_logprob(*b); });
      group.resize(std::min(group.size(), static_cast<size_t>(req_.n)));
    }
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

void CompletionJob::complete() {
  done_ = true;
  if (cancel_timer_) cancel_timer_();
  ctx_.jobs.erase(job_number_);
  const Clock::time_point end = Clock::now();

  int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
  for (const auto& p : req_.prompts) prompt_tokens += static_cast<int64_t>(p.size());
  int32_t most_tokens = 0;
  double queue_delay = -1.0;
  std::string error;
  for (const Choice& c : choices_) {
    completion_tokens += c.completion_tokens;
    if (c.index % candidates() == 0) cached += c.cached_tokens;
    most_tokens = std::max(most_tokens, c.completion_tokens);
    if (c.queue_delay >= 0 && queue_delay < 0) queue_delay = c.queue_delay;
    if (!c.error.empty() && error.empty()) error = c.error;
  }
  const nlohmann::json usage = usage_json(prompt_tokens, completion_tokens, cached);

  int status = 200;
  std::string message;
  if (disconnected_ || out_->disconnected()) {
    status = 499;  // client closed the request (nginx's convention); nothing is sent
  } else if (timed_out_) {
    status = 504;
    message = str_cat("the request did not finish within ", ctx_.config.server.request_timeout_seconds,
                      " seconds and was cancelled");
  } else if (!error.empty()) {
    status = shutting_down_ ? 503 : http_status_for_engine_error(error);
    message = shutting_down_ ? "the server is shutting down; the request was cancelled"
                             : "generation failed: " + error;
  }

  RequestTimings t;
  t.prompt_tokens = prompt_tokens;
  t.generation_tokens = completion_tokens;
  t.e2e = seconds(end - arrival_);
  if (first_token_ != Clock::time_point{}) {
    t.ttft = seconds(first_token_ - arrival_);
    if (most_tokens > 1) t.tpot = seconds(end - first_token_) / (most_tokens - 1);
  }
  t.queue_delay = queue_delay;
  const bool long_tail = ctx_.metrics->record_generation(t);
  int64_t calls = 0, unreadable = 0;
  for (const Choice& c : choices_) {
    calls += static_cast<int64_t>(c.calls.size());
    if (c.tool_parser) unreadable += static_cast<int64_t>(c.tool_parser->unreadable_calls());
  }
  ctx_.metrics->count_tool_calls(calls, unreadable);
  out_->annotate(str_cat(
      "id=", header_.id, " prompt_tokens=", prompt_tokens, " completion_tokens=", completion_tokens,
      " n=", choices_.size(), " stream=", req_.stream ? "true" : "false", " ttft_ms=",
      t.ttft >= 0 ? static_cast<int64_t>(t.ttft * 1000) : -1, " e2e_ms=", static_cast<int64_t>(t.e2e * 1000),
      " finish=", choices_.empty() || choices_[0].finish_reason.empty() ? "none" : choices_[0].finish_reason,
      long_tail ? " long_tail=true" : "", status == 499 ? " client_disconnected=true" : "",
      status == 504 ? " timed_out=true" : ""));

  if (status == 499) return;
  if (status != 200) {
    if (started_stream_) {
      fail_stream(message);
    } else {
      const char* type = status == 504   ? "timeout_error"
                         : status == 503 ? "service_unavailable"
                                         : "server_error";
      out_->send(error_response(ApiError(status, message, type, "", status == 504 ? "request_timeout" : "")));
    }
  } else if (started_stream_) {
    if (req_.include_usage) out_->write_chunk(sse_data(dump(usage_chunk(header_, usage))));
    out_->write_chunk(sse_done());
    out_->end_stream();
  } else {
    for (Choice& c : choices_) {  // candidates that did not score their prompt take its scorer's entries
      if (!scores_prompt() || c.scores) continue;
      const Choice& scorer = choices_[c.prompt * static_cast<size_t>(candidates())];
      c.prompt_logprobs = scorer.prompt_logprobs;
      c.untexted = scorer.untexted;
    }
    std::vector<ChoiceOutput> outputs;
    for (const Choice* c : returned_choices()) {
      const std::string echo = req_.echo_texts.empty() ? "" : req_.echo_texts[c->prompt];
      ChoiceOutput o{static_cast<int32_t>(outputs.size()),
                     echo + c->content,
                     {},
                     c->finish_reason,
                     c->calls,
                     std::nullopt,
                     0,
                     0};
      // Logprobs collected without being asked for only ranked the candidates.
      if (req_.top_logprobs >= 0) set_logprobs(o, c->prompt_logprobs, c->untexted, c->logprobs);
      if (c->reasoning_parser) o.reasoning = c->reasoning;  // "" (no thinking): null
      outputs.push_back(std::move(o));
    }
    HttpResponse r;
    r.body =
        dump(completion_body(header_, ctx_.engine.load()->tokenizer(), outputs, req_.top_logprobs, usage));
    out_->send(std::move(r));
  }
}

}  // namespace dsinfer::server
