// EngineImpl's resilience layer: step failure handling by error class (retry on a smaller batch, preempt and
// retry on out-of-memory, fail fast on sticky device errors), the step watchdog and per-request timeouts,
// the circuit breaker's fallbacks (applied on the engine thread), the metrics rules, fault injection and
// the resilience statistics. See docs/architecture.md, "Resilience".
#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine_impl.h"
#include "resilience/step_error.h"

namespace dsinfer {

namespace {
int64_t to_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void EngineImpl::init_resilience() {
  const ResilienceConfig& r = config_.resilience;
  const CircuitBreakerConfig& b = r.circuit_breaker;
  if (b.enabled) {
    breaker_ = std::make_unique<CircuitBreaker>(b, Clock::now());
    breaker_->set_listener([](const BreakerTransition& t) {
      log_warn("circuit breaker: ", to_string(t.from), " -> ", to_string(t.to), " (fallback level ",
               t.level_from, " -> ", t.level_to, "): ", t.reason);
    });
    if (!b.metrics_rules.empty()) rules_ = std::make_unique<MetricsRuleEvaluator>(b.metrics_rules);
    log_info("engine: circuit breaker on (", b.fallback_strategies.size(), " fallback strategies, ",
             b.metrics_rules.size(), " metrics rules)");
  }
  busy_ = std::make_unique<BusyTracker>(std::chrono::milliseconds(b.enabled ? b.sliding_window_ms : 10000));
  if (r.fault_injection.enabled) {
    faults_ = std::make_unique<FaultInjector>(r.fault_injection);
    log_warn("engine: FAULT INJECTION is on (step_error_rate ", r.fault_injection.step_error_rate,
             ", alloc_failure_rate ", r.fault_injection.alloc_failure_rate, ", step_delay_ms ",
             r.fault_injection.step_delay_ms, ", fail_after_steps ", r.fault_injection.fail_after_steps,
             ", sticky_error_after_steps ", r.fault_injection.sticky_error_after_steps, ")");
  }
  if (r.length_tiers.enabled) {
    log_info("engine: length tiers on (prompts >= ", r.length_tiers.long_prompt_tokens,
             " tokens are long; long prefills take at most ", scheduler_->config().long_prefill_tokens,
             " tokens per step)");
  }
  if (r.watchdog.step_timeout_ms > 0 || r.watchdog.hang_timeout_ms > 0) {
    watchdog_ = std::thread([this] { watchdog_loop(); });
  }
}

bool EngineImpl::ticking() const {
  return breaker_ || rules_ || config_.resilience.watchdog.request_timeout_ms > 0;
}

void EngineImpl::count_error(StepErrorType type, const std::string& what) {
  step_errors_[static_cast<size_t>(type)].fetch_add(1);
  log_warn("engine: step error ", to_string(type), ": ", what);
  if (breaker_) breaker_->record_error(type, Clock::now());
}

void EngineImpl::on_step_failure(const StepSchedule& step, StepErrorType type, const std::string& what) {
  count_error(type, what);
  if (type == StepErrorType::kStickyCudaError) {
    enter_fatal(step_error_message(type, what + "; the device is unusable until the process restarts"));
    return;
  }
  // CUDA_ERROR / TIMEOUT: retry the step's requests on a smaller batch; OUT_OF_MEMORY: the same, and the
  // preemption frees their blocks. Each request survives max_step_retries consecutive failed steps.
  const int32_t max_retries = config_.resilience.watchdog.max_step_retries;
  std::vector<uint64_t> ids;
  for (const ScheduledSeq& e : step.seqs) ids.push_back(e.seq->id);
  for (uint64_t id : ids) {
    const int32_t failures = ++step_failures_[id];
    if (failures > max_retries) {
      abort_request(id, step_error_message(type, str_cat("the request's step failed ", failures,
                                                         " times in a row; last error: ", what)));
    } else if (scheduler_->preempt_request(id)) {
      model_->release_sequence(static_cast<int64_t>(id));
    }
  }
  retry_batch_limit_ = std::max<int32_t>(1, static_cast<int32_t>(ids.size()) / 2);
  update_batch_limit();
}

void EngineImpl::on_step_success(const StepSchedule& step, Clock::time_point start, Clock::time_point end) {
  for (const ScheduledSeq& e : step.seqs) step_failures_.erase(e.seq->id);
  if (retry_batch_limit_ > 0) {
    retry_batch_limit_ *= 2;
    if (retry_batch_limit_ >= config_.max_batch_size) retry_batch_limit_ = 0;
    update_batch_limit();
  }
  if (breaker_) breaker_->record_step(end - start, end);
}

void EngineImpl::on_request_end(uint64_t id, const std::string& error) {
  step_failures_.erase(id);
  if (!breaker_) return;
  if (error.empty()) {
    breaker_->record_request(true, Clock::now());
  } else if (http_status_for_engine_error(error) != 500) {
    breaker_->record_request(false, Clock::now());
  }
}

void EngineImpl::enter_fatal(const std::string& message) {
  if (!fatal_flag_) log_error("engine: unrecoverable: ", message);
  fatal_flag_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fatal_.empty()) fatal_ = message;
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, state] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) abort_request(id, message);
}

void EngineImpl::update_batch_limit() {
  int32_t limit = 0;
  for (int32_t l : {fallback_batch_limit_, retry_batch_limit_}) {
    if (l > 0) limit = limit > 0 ? std::min(limit, l) : l;
  }
  scheduler_->set_batch_limit(limit);
  batch_limit_.store(limit);
}

void EngineImpl::apply_fallbacks(int32_t level) {
  const std::vector<FallbackStrategy>& strategies = config_.resilience.circuit_breaker.fallback_strategies;
  int32_t batch = 0;
  for (int32_t i = 0; i < level && i < static_cast<int32_t>(strategies.size()); ++i) {
    const FallbackStrategy& f = strategies[i];
    if (f.type == "reduce_batch_size") {
      const int32_t from = batch > 0 ? batch : config_.max_batch_size;
      batch = std::max(f.min_batch, from / f.step);
    }
  }
  for (int32_t i = std::min(applied_level_, level); i < std::max(applied_level_, level); ++i) {
    const FallbackStrategy& f = strategies[i];
    const bool on = level > applied_level_;
    if (f.type == "reduce_batch_size") {
      log_warn("engine: fallback ", i + 1, " reduce_batch_size ", on ? "applied" : "reverted", ": at most ",
               batch > 0 ? batch : config_.max_batch_size, " sequences per step");
    } else if (f.type == "switch_precision") {
      log_warn("engine: fallback ", i + 1, " switch_precision ", on ? "applied" : "reverted", " (target ",
               f.target, "): the weights have no FP8 copy, so there is nothing to switch");
    }
  }
  applied_level_ = level;
  fallback_batch_limit_ = batch;
  update_batch_limit();
}

void EngineImpl::resilience_tick() {
  const Clock::time_point now = Clock::now();
  if (fatal_flag_) {
    std::string message;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      message = fatal_;
    }
    enter_fatal(message);  // requests admitted since fail at once
  }
  const int64_t request_timeout_ms = config_.resilience.watchdog.request_timeout_ms;
  if (request_timeout_ms > 0) {
    std::vector<uint64_t> late;
    for (const auto& [id, state] : requests_) {
      if (now - state->arrival() > std::chrono::milliseconds(request_timeout_ms)) late.push_back(id);
    }
    std::sort(late.begin(), late.end());
    for (uint64_t id : late) {
      request_timeouts_.fetch_add(1);
      if (breaker_) breaker_->record_error(StepErrorType::kTimeout, now);
      abort_request(id, step_error_message(StepErrorType::kTimeout,
                                           str_cat("the request ran longer than watchdog.request_timeout (",
                                                   request_timeout_ms, " ms)")));
    }
  }
  if (breaker_) {
    breaker_->tick(now);
    const int32_t level = breaker_->level();
    if (level != applied_level_) apply_fallbacks(level);
  }
  if (now - last_rules_eval_ < std::chrono::milliseconds(100)) return;
  last_rules_eval_ = now;
  const double util = busy_->fraction(now);
  busy_fraction_.store(util);
  if (rules_) {
    const int64_t allocated = static_cast<int64_t>(pool_->num_used()) * pool_->block_size();
    const double frag = allocated > 0 ? static_cast<double>(scheduler_->allocated_unused_slots()) /
                                            static_cast<double>(allocated)
                                      : 0.0;
    for (size_t i : rules_->evaluate(util, frag, now)) {
      const MetricsRule& r = rules_->rules()[i];
      const double v = r.metric == "gpu_utilization" ? util : frag;
      if (r.action == "scale_out") {
        log_warn("metrics rule: ", r.metric, " = ", v, " (", r.condition, "): scale-out recommended");
      } else if (r.action == "reinit_cache") {
        const int32_t freed = pool_->evict_cached();
        cache_reinits_.fetch_add(1);
        log_warn("metrics rule: ", r.metric, " = ", v, " (", r.condition, "): prefix cache reset, ", freed,
                 " cached blocks freed; running requests keep theirs");
      }
    }
    scale_out_.store(rules_->scale_out_active());
  }
}

void EngineImpl::begin_step_watch(Clock::time_point start) {
  step_seq_.fetch_add(1);
  step_start_ns_.store(to_ns(start));
}

bool EngineImpl::end_step_watch() {
  const int64_t start = step_start_ns_.exchange(0);
  const uint64_t seq = step_seq_.load();
  if (timeout_flagged_.load() == seq) return true;
  const int64_t timeout_ms = config_.resilience.watchdog.step_timeout_ms;
  if (timeout_ms > 0 && start > 0 && to_ns(Clock::now()) - start > timeout_ms * 1000000) {
    timeout_flagged_.store(seq);
    count_error(StepErrorType::kTimeout,
                str_cat("step took longer than watchdog.step_timeout (", timeout_ms, " ms)"));
    return true;
  }
  return false;
}

void EngineImpl::watchdog_loop() {
  const int64_t timeout_ms = config_.resilience.watchdog.step_timeout_ms;
  const auto period =
      std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms > 0 ? timeout_ms / 4 : 100, 5, 100));
  std::unique_lock<std::mutex> lock(watchdog_mu_);
  while (!watchdog_wake_.wait_for(lock, period, [this] { return watchdog_stop_; })) {
    const int64_t start = step_start_ns_.load();
    const uint64_t seq = step_seq_.load();
    if (timeout_ms <= 0 || start == 0 || to_ns(Clock::now()) - start <= timeout_ms * 1000000) continue;
    uint64_t flagged = timeout_flagged_.load();
    if (flagged == seq || !timeout_flagged_.compare_exchange_strong(flagged, seq)) continue;
    count_error(StepErrorType::kTimeout,
                str_cat("watchdog: step ", seq, " is still running after watchdog.step_timeout (", timeout_ms,
                        " ms)"));
  }
}

void EngineImpl::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
}

EngineAdmission EngineImpl::admission() {
  const std::string fatal = fatal_error();
  if (!fatal.empty()) return {false, 0, fatal};
  if (!breaker_) return {};
  const CircuitBreaker::Admission a = breaker_->admit(Clock::now());
  if (a.allowed) return {};
  return {false, a.retry_after_seconds,
          str_cat("the circuit breaker is ", to_string(breaker_->state()),
                  " after repeated step failures; retry in ", a.retry_after_seconds, " s")};
}

std::string EngineImpl::fatal_error() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!fatal_.empty()) return fatal_;
  }
  const int64_t hang_ms = config_.resilience.watchdog.hang_timeout_ms;
  const int64_t start = step_start_ns_.load();
  if (hang_ms > 0 && start > 0) {
    const int64_t running_ms = (to_ns(Clock::now()) - start) / 1000000;
    if (running_ms > hang_ms) {
      return str_cat("TIMEOUT: the engine step has been running for ", running_ms,
                     " ms, beyond watchdog.hang_timeout (", hang_ms, " ms): the engine is hung");
    }
  }
  return "";
}

void EngineImpl::fill_resilience_stats(EngineStats& s) const {
  s.breaker_enabled = breaker_ != nullptr;
  if (breaker_) {
    s.breaker_state = static_cast<int32_t>(breaker_->state());
    s.fallback_level = breaker_->level();
    s.breaker_transitions = breaker_->transitions();
  }
  for (size_t i = 0; i < s.step_errors.size(); ++i) s.step_errors[i] = step_errors_[i].load();
  s.request_timeouts = request_timeouts_.load();
  s.engine_busy_fraction = busy_fraction_.load();
  s.scale_out_recommended = scale_out_.load();
  s.cache_reinits = cache_reinits_.load();
  s.batch_limit = batch_limit_.load();
}

}  // namespace dsinfer
