// EngineImpl: the Engine behind Engine::create. One engine thread owns the scheduler, the block pool, the
// KV cache and the model; submit() and cancel() hand work to it through a mutex-protected inbox, and events
// are delivered from it through each request's callback.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dsinfer/engine.h"
#include "engine/request_state.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "resilience/circuit_breaker.h"
#include "resilience/fault_injector.h"
#include "resilience/metrics_rules.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

// An engine over an already loaded model (tests build one per fixture model; models without a tokenizer
// produce token ids and empty text). The engine shares the backend and the model: a caller that keeps its
// own references (eval batch-agreement) may use them again once the engine is gone.
std::unique_ptr<Engine> make_engine(const EngineConfig& config, std::shared_ptr<Backend> backend,
                                    std::shared_ptr<Model> model, std::optional<Tokenizer> tokenizer);

class EngineImpl : public Engine {
 public:
  EngineImpl(const EngineConfig& config, std::shared_ptr<Backend> backend, std::shared_ptr<Model> model,
             std::optional<Tokenizer> tokenizer);
  ~EngineImpl() override;

  uint64_t submit(GenerationRequest request) override;
  std::vector<uint64_t> submit_all(std::vector<GenerationRequest> requests) override;
  void cancel(uint64_t request_id) override;
  EngineStats stats() const override;
  EngineAdmission admission() override;
  std::string fatal_error() const override;
  const Tokenizer& tokenizer() const override;
  const ModelConfig& model_config() const override;
  void shutdown(std::chrono::milliseconds timeout) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Submission {
    uint64_t id;
    GenerationRequest request;
    Clock::time_point arrival;
  };

  // Throws dsinfer::Error for a request the engine cannot take (submit's checks, before the queue's).
  void validate(const GenerationRequest& request) const;
  void loop();
  void admit(Submission submission);
  // GPU: runs one step of max_num_tokens tokens on a small cache so that the caching allocator holds the
  // activations' peak before the KV cache takes its share of the memory left, and returns the device bytes
  // the model's CUDA graphs will need (Model::profile_graph_memory); throws a clear error when either does
  // not fit.
  int64_t profile_step_memory(const std::vector<KvLayerSpec>& layers);
  // Records the model's CUDA graphs of decode steps for contexts up to cuda_graph_precapture_context now,
  // on the fresh cache's scratch block (no-op at 0 and for models without graphs).
  void precapture_graphs();
  // The largest decode batch the model's CUDA graphs take (cuda_graph_batch_limit), for messages.
  int32_t graph_batch_limit() const;
  void run_step();
  // Pieces of a step (engine_impl.cpp): schedule (dropping preempted state, ending failed requests); build
  // the plan and launch the forward pass (false: it failed and was handled); hand sampled tokens to their
  // requests (ids[r]: the request of row r, 0 for a dropped row).
  StepSchedule schedule_step();
  bool launch_forward(const StepSchedule& step, Tensor* logits);
  void deliver_tokens(const std::vector<uint64_t>& ids, const std::vector<SampledToken>& sampled);
  // Prompt scoring (SamplingParams::prompt_logprobs): the forced rows that score `scored`, sampled after a
  // step's sampled rows, and their results (sampled[first + i] for scored[i]) handed to their requests.
  std::vector<SamplingRow> prompt_score_rows(const std::vector<PromptLogprobRow>& scored) const;
  void deliver_prompt_scores(const std::vector<PromptLogprobRow>& scored,
                             const std::vector<SampledToken>& sampled, size_t first);
  // A sampling call failed as a whole: every request with a row in it ends (ids: sampled rows, 0 = dropped).
  void abort_sampled(const std::vector<uint64_t>& ids, const std::vector<PromptLogprobRow>& scored,
                     const std::exception& error);
  // Async scheduling (engine_async.cpp): launches step N+1, then finishes step N while it runs.
  void run_step_async();
  // Waits for the in-flight step's sampled tokens and delivers them (no-op when none is in flight).
  void finish_inflight();
  // Ends a request without a token: removes it everywhere and delivers its final event.
  void abort_request(uint64_t id, const std::string& error);
  void publish_stats();

  // Resilience (engine_resilience.cpp).
  void init_resilience();
  bool ticking() const;  // the loop must wake periodically (breaker, rules, request timeouts)
  void resilience_tick();
  void on_step_failure(const StepSchedule& step, StepErrorType type, const std::string& what);
  void on_step_success(const StepSchedule& step, Clock::time_point start, Clock::time_point end);
  void on_request_end(uint64_t id, const std::string& error);
  void count_error(StepErrorType type, const std::string& what);
  void enter_fatal(const std::string& message);
  void apply_fallbacks(int32_t level);
  void update_batch_limit();
  void begin_step_watch(Clock::time_point start);
  bool end_step_watch();  // true when the watchdog already reported this step as a TIMEOUT
  void watchdog_loop();
  void stop_watchdog();
  void fill_resilience_stats(EngineStats& s) const;

  EngineConfig config_;
  std::shared_ptr<Backend> backend_;  // declared first: outlives the model when the engine owns both
  std::shared_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<const TokenTrie> json_vocab_;  // JSON-constrained decoding (built with the engine)
  int64_t context_;
  int32_t vocab_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;  // engine thread only
  double peak_utilization_ = 0.0;
  bool async_ = false;                  // async scheduling (EngineConfig::async_scheduling)
  bool inflight_ = false;               // a step's sampling is queued and its results not yet taken
  std::vector<uint64_t> inflight_ids_;  // the request of each of its rows (0: dropped row)
  std::vector<PromptLogprobRow> inflight_scored_;  // its prompt-scoring rows, after those
  int64_t fed_tokens_ = 0;
  int64_t dropped_entries_ = 0;

  // Resilience state (engine thread unless atomic or noted).
  std::unique_ptr<CircuitBreaker> breaker_;  // thread-safe
  std::unique_ptr<FaultInjector> faults_;
  std::unique_ptr<MetricsRuleEvaluator> rules_;
  std::unique_ptr<BusyTracker> busy_;
  std::unordered_map<uint64_t, int32_t> step_failures_;  // consecutive failed steps per request
  int32_t applied_level_ = 0;
  int32_t fallback_batch_limit_ = 0;
  int32_t retry_batch_limit_ = 0;
  bool fatal_flag_ = false;
  Clock::time_point last_rules_eval_{};
  std::array<std::atomic<int64_t>, 4> step_errors_{};
  std::atomic<int64_t> request_timeouts_{0};
  std::atomic<int64_t> cache_reinits_{0};
  std::atomic<int64_t> step_start_ns_{0};  // steady-clock ns when the running step began (0: none)
  std::atomic<uint64_t> step_seq_{0};
  std::atomic<uint64_t> timeout_flagged_{0};
  std::atomic<bool> scale_out_{false};
  std::atomic<double> busy_fraction_{0.0};
  std::atomic<int32_t> batch_limit_{0};
  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_wake_;
  bool watchdog_stop_ = false;  // guarded by watchdog_mu_

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  bool accepting_ = true;
  bool shutting_down_ = false;
  Clock::time_point deadline_{};
  EngineStats stats_;
  std::string fatal_;  // the unrecoverable error, once there is one
  std::thread thread_;
};

}  // namespace dsinfer
