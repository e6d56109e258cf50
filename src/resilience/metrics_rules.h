// Metrics rules of the circuit_breaker section: each rule watches one engine metric (gpu_utilization:
// the engine thread's busy share over the breaker's sliding window; memory_fragmentation: the KV
// fragmentation ratio) and fires its action once the condition has held for its duration. A rule fires
// once per episode (the condition must clear before it fires again); scale_out stays active while its
// condition holds. BusyTracker measures the busy share.
#pragma once
#include <chrono>
#include <deque>
#include <vector>

#include "resilience/resilience_config.h"

namespace dsinfer {

class BusyTracker {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit BusyTracker(std::chrono::milliseconds window) : window_(window) {}
  void add(TimePoint start, TimePoint end);
  // Busy time within [now - window, now] / window (0..1).
  double fraction(TimePoint now);

 private:
  std::chrono::milliseconds window_;
  std::deque<std::pair<TimePoint, TimePoint>> spans_;
};

class MetricsRuleEvaluator {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit MetricsRuleEvaluator(std::vector<MetricsRule> rules);
  // Returns the indices of the rules that fire at `now`.
  std::vector<size_t> evaluate(double gpu_utilization, double memory_fragmentation, TimePoint now);
  bool scale_out_active() const;
  const std::vector<MetricsRule>& rules() const { return rules_; }

 private:
  struct RuleState {
    bool holding = false;
    TimePoint since{};
    bool fired = false;
  };
  std::vector<MetricsRule> rules_;
  std::vector<RuleState> state_;
};

}  // namespace dsinfer
