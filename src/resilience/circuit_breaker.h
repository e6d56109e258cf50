// CircuitBreaker: the degradation state machine of the engine. States: closed -> degraded (fallback level
// 1..N, one level per breach) -> open (new requests refused until a cool-down passes) -> half-open (a few
// probe requests) -> closed again, then one fallback level is stepped back per healthy recovery interval.
// A breach is `error_threshold` errors of the configured types within the error window, or a mean step
// latency above max_latency_ms over the sliding window. Every method takes the current time, so tests drive
// it with a fake clock. Thread-safe; the listener runs under the breaker's lock and must not call back.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "resilience/resilience_config.h"

namespace dsinfer {

enum class BreakerState { kClosed = 0, kDegraded = 1, kOpen = 2, kHalfOpen = 3 };  // metric values
const char* to_string(BreakerState state);

struct BreakerTransition {
  BreakerState from = BreakerState::kClosed;
  BreakerState to = BreakerState::kClosed;
  int32_t level_from = 0;
  int32_t level_to = 0;
  std::string reason;
};

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  struct Admission {
    bool allowed = true;
    double retry_after_seconds = 0;  // when refused
  };

  CircuitBreaker(const CircuitBreakerConfig& config, TimePoint now);
  void set_listener(std::function<void(const BreakerTransition&)> listener);

  // A step finished (successfully) after `latency`.
  void record_step(std::chrono::nanoseconds latency, TimePoint now);
  // A step (or request) failed with `type`; only the configured error_types count.
  void record_error(StepErrorType type, TimePoint now);
  // A request finished; in half-open, successes close the breaker and a failure reopens it.
  void record_request(bool ok, TimePoint now);
  // Whether a new request may start (half-open lets half_open_probes through).
  Admission admit(TimePoint now);
  // Time-driven transitions (open -> half-open, stepping fallbacks back).
  void tick(TimePoint now);

  BreakerState state() const;
  int32_t level() const;      // fallback strategies applied (0..max_level)
  int32_t max_level() const;  // the number of fallback strategies
  int64_t transitions() const;
  const CircuitBreakerConfig& config() const { return config_; }

 private:
  void advance(TimePoint now);  // time-driven transitions; lock held
  void check_breach(TimePoint now);
  void breach(TimePoint now, const std::string& reason);
  void move(BreakerState to, int32_t level, const std::string& reason);
  void open(TimePoint now, const std::string& reason);
  void clear_windows();
  bool counts(StepErrorType type) const;

  const CircuitBreakerConfig config_;
  mutable std::mutex mu_;
  std::function<void(const BreakerTransition&)> listener_;
  BreakerState state_ = BreakerState::kClosed;
  int32_t level_ = 0;
  std::deque<TimePoint> errors_;                        // counted errors within the error window
  std::deque<std::pair<TimePoint, double>> latencies_;  // step latencies (ms) within the sliding window
  double latency_sum_ = 0;
  TimePoint healthy_since_;  // last level change or counted error: recovery measures from here
  TimePoint opened_at_;
  TimePoint half_open_since_;  // probes admitted but never finished are re-offered after a cool-down
  int32_t probes_admitted_ = 0;
  int32_t probe_successes_ = 0;
  int64_t transitions_ = 0;
};

}  // namespace dsinfer
