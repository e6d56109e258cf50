// A scripted Engine for server tests: a real tokenizer and model config, and an engine thread that emits one
// token per request every `token_delay` (tokens derived from the prompt and seed, so outputs are
// reproducible, or a fixed script), honours max_tokens, stop strings, logprobs, cancel() and its queue limit,
// scores prompts (prompt_logprobs: fake_prompt_score's values, in the first event; max_tokens 0 then ends
// there), can be paused, and records every cancel so tests can observe them.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "dsinfer/engine.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::testing {

class FakeEngine : public Engine {
 public:
  struct Options {
    std::chrono::milliseconds token_delay{1};
    int32_t max_queue_length =
        100000;                  // the engine's own limit (the server applies its configured one first)
    int32_t max_running = 1000;  // requests beyond this wait
    // The generated tokens are drawn from this text's tokens.
    std::string words = " alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
    // When set, every request generates this text's tokens in order instead, then stops (as at an EOS).
    std::string script;
    // The tokenizer's directory when not the model's.
    std::string tokenizer_dir;
  };

  FakeEngine(const std::string& model_dir, Options options)
      : options_(options),
        tokenizer_(Tokenizer::load(options.tokenizer_dir.empty() ? model_dir : options.tokenizer_dir)),
        config_(load_model_config(model_dir)) {
    for (int32_t id : tokenizer_.encode(options_.words, false)) words_.push_back(id);
    if (!options_.script.empty()) script_ = tokenizer_.encode(options_.script, false);
    thread_ = std::thread([this]() { loop(); });
  }
  ~FakeEngine() override { shutdown(std::chrono::milliseconds(0)); }

  uint64_t submit(GenerationRequest request) override {
    request.sampling.validate(static_cast<int32_t>(config_.vocab_size));
    std::lock_guard<std::mutex> lock(mu_);
    DSI_CHECK(!stopping_, "the engine is shutting down");
    DSI_CHECK(waiting_count() < options_.max_queue_length, "the request queue is full");
    const uint64_t id = next_id_++;
    Req r;
    r.request = std::move(request);
    r.arrival = std::chrono::steady_clock::now();
    uint64_t h = request_hash(r.request.prompt_ids, r.request.sampling.seed.value_or(0));
    r.state = h;
    last_prompt_ = r.request.prompt_ids;
    last_sampling_ = r.request.sampling;
    if (r.request.sampling.prompt_logprobs >= 0) ++scored_submissions_;
    reqs_[id] = std::move(r);
    order_.push_back(id);
    ++submitted_;
    cv_.notify_all();
    return id;
  }

  // Not atomic here: the fake's loop has no batch composition to keep.
  std::vector<uint64_t> submit_all(std::vector<GenerationRequest> requests) override {
    std::vector<uint64_t> ids;
    for (GenerationRequest& r : requests) ids.push_back(submit(std::move(r)));
    return ids;
  }

  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.insert(id);
    auto it = reqs_.find(id);
    if (it != reqs_.end()) it->second.cancelled = true;
    cv_.notify_all();
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s;
    s.running = std::min<int32_t>(static_cast<int32_t>(reqs_.size()), options_.max_running);
    s.waiting = waiting_count();
    s.kv_blocks_total = 100;
    s.kv_blocks_used = s.running;
    s.kv_blocks_cached = 3;
    s.kv_utilization = s.running / 100.0;
    s.fragmentation = 0.25;
    s.preemptions = 2;
    s.cuda_graph_replays = 7;
    s.cuda_graph_capture_failures = 1;
    s.cuda_graph_captures = 5;
    s.cuda_graph_capture_seconds = 0.25;
    return s;
  }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  const ModelConfig& model_config() const override { return config_; }

  void shutdown(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (auto& [id, r] : reqs_) r.cancelled = true;
      paused_ = false;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  // While paused, nothing is scheduled (requests pile up as "waiting").
  void set_paused(bool paused) {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
    cv_.notify_all();
  }
  size_t cancel_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_.size();
  }
  size_t submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  // Submitted requests that asked for their prompt to be scored.
  size_t scored_submissions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return scored_submissions_;
  }
  // The prompt of the latest submitted request.
  std::vector<int32_t> last_prompt() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_prompt_;
  }
  // The sampling parameters of the latest submitted request.
  SamplingParams last_sampling() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_sampling_;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reqs_.size();
  }
  // The text a request with this prompt and seed produces (for max_tokens tokens, no stop strings).
  std::string expected_text(const std::vector<int32_t>& prompt, uint64_t seed, int32_t max_tokens) const {
    std::string text;
    for (int32_t id : expected_ids(prompt, seed, max_tokens)) text += tokenizer_.decode({id});
    return text;
  }
  std::vector<int32_t> expected_ids(const std::vector<int32_t>& prompt, uint64_t seed,
                                    int32_t max_tokens) const {
    uint64_t state = request_hash(prompt, seed);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < max_tokens; ++i) ids.push_back(next_token(state));
    return ids;
  }

 private:
  struct Req {
    GenerationRequest request;
    std::chrono::steady_clock::time_point arrival, scheduled, first_token;
    uint64_t state = 0;
    int32_t generated = 0;
    size_t script_pos = 0;
    std::string text;
    bool cancelled = false;
    bool scored = false;  // its prompt scores went out
  };

 public:
  // The fake's score of prompt token i + 1 (prompt_logprobs): -0.25 (i + 1), the token itself the best of
  // `top` alternatives, the others the generated words at -1, -2, ...
  TokenLogprob fake_prompt_score(const std::vector<int32_t>& prompt, size_t i, int32_t top) const {
    TokenLogprob lp{prompt[i + 1], -0.25f * static_cast<float>(i + 1), {}};
    for (int32_t k = 0; k < top; ++k)
      lp.top.emplace_back(k == 0 ? lp.token : words_[static_cast<size_t>(k) % words_.size()],
                          k == 0 ? lp.logprob : -1.0f * k);
    return lp;
  }

 private:
  static uint64_t request_hash(const std::vector<int32_t>& prompt, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
    for (int32_t id : prompt) h = (h ^ static_cast<uint64_t>(id)) * 1099511628211ull;
    return h;
  }
  int32_t next_token(uint64_t& state) const {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return words_[(state >> 33) % words_.size()];
  }
  int32_t waiting_count() const {
    return std::max<int32_t>(0, static_cast<int32_t>(reqs_.size()) - (paused_ ? 0 : options_.max_running));
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait_for(lock, options_.token_delay, [&]() { return stopping_ && reqs_.empty(); });
      if (stopping_ && reqs_.empty()) return;
      std::vector<std::pair<std::function<void(const RequestEvent&)>, RequestEvent>> out;
      int32_t slots = paused_ ? 0 : options_.max_running;
      for (auto it = order_.begin(); it != order_.end();) {
        auto rit = reqs_.find(*it);
        if (rit == reqs_.end()) {
          it = order_.erase(it);
          continue;
        }
        Req& r = rit->second;
        RequestEvent ev;
        ev.request_id = *it;
        ev.arrival = r.arrival;
        if (r.cancelled) {
          ev.finished = true;
          ev.error = "cancelled";
        } else if (slots > 0) {
          --slots;
          const auto now = std::chrono::steady_clock::now();
          if (r.scheduled == std::chrono::steady_clock::time_point{}) r.scheduled = now;
          const SamplingParams& sp = r.request.sampling;
          if (sp.prompt_logprobs >= 0 && !r.scored) {
            r.scored = true;
            for (size_t i = 0; i + 1 < r.request.prompt_ids.size(); ++i)
              ev.prompt_logprobs.push_back(fake_prompt_score(r.request.prompt_ids, i, sp.prompt_logprobs));
          }
          const int32_t id = script_.empty() ? next_token(r.state) : script_[r.script_pos++];
          std::string piece = tokenizer_.decode({id});
          r.generated++;
          bool stop = false;
          for (const auto& s : r.request.sampling.stop) {
            if ((r.text + piece).find(s) != std::string::npos) stop = true;
          }
          if (sp.max_tokens == 0) {  // the prompt scored alone
            r.generated = 0;
            ev.finished = true;
            ev.finish_reason = FinishReason::kLength;
          } else if (stop) {
            ev.finished = true;
            ev.finish_reason = FinishReason::kStop;
          } else {
            if (r.first_token == std::chrono::steady_clock::time_point{}) r.first_token = now;
            r.text += piece;
            ev.token_ids = {id};
            ev.text = piece;
            if (r.request.sampling.logprobs > 0) {
              TokenLogprob lp{id, -0.5f, {}};
              for (int32_t k = 0; k < r.request.sampling.logprobs; ++k) {
                lp.top.emplace_back(k == 0 ? id : words_[static_cast<size_t>(k) % words_.size()], -0.5f - k);
              }
              ev.logprobs.push_back(lp);
            }
            if (r.generated >= r.request.sampling.max_tokens) {
              ev.finished = true;
              ev.finish_reason = FinishReason::kLength;
            } else if (!script_.empty() && r.script_pos == script_.size()) {
              ev.finished = true;
              ev.finish_reason = FinishReason::kStop;
            }
          }
          ev.first_scheduled = r.scheduled;
          ev.first_token = r.first_token;
        } else {
          ++it;
          continue;
        }
        ev.usage.prompt_tokens = static_cast<int32_t>(r.request.prompt_ids.size());
        ev.usage.completion_tokens = static_cast<int32_t>(r.text.empty() ? 0 : r.generated);
        if (ev.finish_reason == FinishReason::kLength || ev.finish_reason == FinishReason::kNone) {
          ev.usage.completion_tokens = r.generated;
        }
        out.emplace_back(r.request.on_event, ev);
        if (ev.finished) {
          reqs_.erase(rit);
          it = order_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (auto& [fn, ev] : out) fn(ev);
      lock.lock();
    }
  }

  Options options_;
  Tokenizer tokenizer_;
  ModelConfig config_;
  std::vector<int32_t> words_;
  std::vector<int32_t> script_;
  std::vector<int32_t> last_prompt_;
  SamplingParams last_sampling_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Req> reqs_;
  std::deque<uint64_t> order_;
  std::set<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  size_t submitted_ = 0;
  size_t scored_submissions_ = 0;
  bool paused_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dsinfer::testing
