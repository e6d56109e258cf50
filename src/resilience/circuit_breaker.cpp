// CircuitBreaker: windows, breaches, the open/half-open cycle and recovery.
#include "resilience/circuit_breaker.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsinfer {

const char* to_string(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kDegraded:
      return "degraded";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

namespace {
std::chrono::milliseconds ms(int64_t v) {
  return std::chrono::milliseconds(v);
}
}  // namespace

CircuitBreaker::CircuitBreaker(const CircuitBreakerConfig& config, TimePoint now)
    : config_(config), healthy_since_(now), opened_at_(now) {}

void CircuitBreaker::set_listener(std::function<void(const BreakerTransition&)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

bool CircuitBreaker::counts(StepErrorType type) const {
  return std::find(config_.error_types.begin(), config_.error_types.end(), type) != config_.error_types.end();
}

void CircuitBreaker::clear_windows() {
  errors_.clear();
  latencies_.clear();
  latency_sum_ = 0;
}

void CircuitBreaker::move(BreakerState to, int32_t level, const std::string& reason) {
  BreakerTransition t{state_, to, level_, level, reason};
  state_ = to;
  level_ = level;
  ++transitions_;
  if (listener_) listener_(t);
}

void CircuitBreaker::open(TimePoint now, const std::string& reason) {
  opened_at_ = now;
  probes_admitted_ = 0;
  probe_successes_ = 0;
  clear_windows();
  move(BreakerState::kOpen, level_, reason);
}

void CircuitBreaker::breach(TimePoint now, const std::string& reason) {
  healthy_since_ = now;
  if (level_ < max_level()) {
    clear_windows();  // one level per breach: the next one needs fresh evidence
    move(BreakerState::kDegraded, level_ + 1, reason);
  } else {
    open(now, reason + "; every fallback is applied");
  }
}

void CircuitBreaker::check_breach(TimePoint now) {
  if (state_ != BreakerState::kClosed && state_ != BreakerState::kDegraded) return;
  while (!errors_.empty() && now - errors_.front() >= ms(config_.error_window_ms)) errors_.pop_front();
  while (!latencies_.empty() && now - latencies_.front().first >= ms(config_.sliding_window_ms)) {
    latency_sum_ -= latencies_.front().second;
    latencies_.pop_front();
  }
  if (config_.error_threshold > 0 && static_cast<int32_t>(errors_.size()) >= config_.error_threshold) {
    breach(now, str_cat(errors_.size(), " step errors within ", config_.error_window_ms, " ms (threshold ",
                        config_.error_threshold, ")"));
    return;
  }
  if (config_.max_latency_ms > 0 && static_cast<int32_t>(latencies_.size()) >= config_.min_latency_samples) {
    const double mean = latency_sum_ / static_cast<double>(latencies_.size());
    if (mean > static_cast<double>(config_.max_latency_ms)) {
      breach(now, str_cat("mean step latency ", std::lround(mean), " ms over ", config_.sliding_window_ms,
                          " ms exceeds ", config_.max_latency_ms, " ms"));
    }
  }
}

void CircuitBreaker::advance(TimePoint now) {
  if (state_ == BreakerState::kOpen && now - opened_at_ >= ms(config_.cooldown_ms)) {
    probes_admitted_ = 0;
    probe_successes_ = 0;
    half_open_since_ = now;
    move(BreakerState::kHalfOpen, level_, str_cat("cool-down of ", config_.cooldown_ms, " ms over"));
    return;
  }
  if (state_ == BreakerState::kHalfOpen && now - half_open_since_ >= ms(config_.cooldown_ms)) {
    half_open_since_ = now;  // probes that never reported (refused, cancelled) free their slots
    probes_admitted_ = probe_successes_;
  }
  if ((state_ == BreakerState::kDegraded || state_ == BreakerState::kClosed) && level_ > 0 &&
      now - healthy_since_ >= ms(config_.recovery_interval_ms)) {
    healthy_since_ = now;
    move(level_ - 1 > 0 ? BreakerState::kDegraded : BreakerState::kClosed, level_ - 1,
         str_cat("healthy for ", config_.recovery_interval_ms, " ms"));
  }
}

void CircuitBreaker::record_step(std::chrono::nanoseconds latency, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  advance(now);
  if (state_ != BreakerState::kClosed && state_ != BreakerState::kDegraded) return;
  if (config_.max_latency_ms <= 0) return;
  const double v = std::chrono::duration<double, std::milli>(latency).count();
  latencies_.emplace_back(now, v);
  latency_sum_ += v;
  check_breach(now);
}

void CircuitBreaker::record_error(StepErrorType type, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  advance(now);
  if (!counts(type)) return;
  if (state_ == BreakerState::kHalfOpen) {
    open(now, str_cat("a ", to_string(type), " error while half-open"));
    return;
  }
  if (state_ == BreakerState::kOpen) return;
  healthy_since_ = now;
  errors_.push_back(now);
  check_breach(now);
}

void CircuitBreaker::record_request(bool ok, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  advance(now);
  if (state_ != BreakerState::kHalfOpen) return;
  if (!ok) {
    open(now, "a probe request failed");
    return;
  }
  if (++probe_successes_ >= config_.half_open_probes) {
    healthy_since_ = now;
    clear_windows();
    move(level_ > 0 ? BreakerState::kDegraded : BreakerState::kClosed, level_,
         str_cat(probe_successes_, " probe requests succeeded"));
  }
}

CircuitBreaker::Admission CircuitBreaker::admit(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  advance(now);
  if (state_ == BreakerState::kOpen) {
    const double left = std::chrono::duration<double>(opened_at_ + ms(config_.cooldown_ms) - now).count();
    return {false, std::max(1.0, std::ceil(left))};
  }
  if (state_ == BreakerState::kHalfOpen) {
    if (probes_admitted_ >= config_.half_open_probes) return {false, 1.0};
    ++probes_admitted_;
  }
  return {true, 0};
}

void CircuitBreaker::tick(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  advance(now);
  check_breach(now);
}

BreakerState CircuitBreaker::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

int32_t CircuitBreaker::level() const {
  std::lock_guard<std::mutex> lock(mu_);
  return level_;
}

int32_t CircuitBreaker::max_level() const {
  return static_cast<int32_t>(config_.fallback_strategies.size());
}

int64_t CircuitBreaker::transitions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transitions_;
}

}  // namespace dsinfer
