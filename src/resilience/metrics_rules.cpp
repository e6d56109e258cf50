// BusyTracker and MetricsRuleEvaluator.
#include "resilience/metrics_rules.h"

#include <algorithm>

namespace dsinfer {

void BusyTracker::add(TimePoint start, TimePoint end) {
  if (end > start) spans_.emplace_back(start, end);
}

double BusyTracker::fraction(TimePoint now) {
  const TimePoint from = now - window_;
  while (!spans_.empty() && spans_.front().second <= from) spans_.pop_front();
  std::chrono::nanoseconds busy{0};
  for (const auto& [s, e] : spans_) busy += std::min(e, now) - std::max(s, from);
  return std::clamp(
      std::chrono::duration<double>(busy).count() / std::chrono::duration<double>(window_).count(), 0.0, 1.0);
}

MetricsRuleEvaluator::MetricsRuleEvaluator(std::vector<MetricsRule> rules)
    : rules_(std::move(rules)), state_(rules_.size()) {}

std::vector<size_t> MetricsRuleEvaluator::evaluate(double gpu_utilization, double memory_fragmentation,
                                                   TimePoint now) {
  std::vector<size_t> fired;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const MetricsRule& r = rules_[i];
    RuleState& s = state_[i];
    const double v = r.metric == "gpu_utilization" ? gpu_utilization : memory_fragmentation;
    const bool holds = r.greater ? v > r.threshold : v < r.threshold;
    if (!holds) {
      s = RuleState{};
      continue;
    }
    if (!s.holding) {
      s.holding = true;
      s.since = now;
    }
    if (!s.fired && now - s.since >= std::chrono::milliseconds(r.for_ms)) {
      s.fired = true;
      fired.push_back(i);
    }
  }
  return fired;
}

bool MetricsRuleEvaluator::scale_out_active() const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].action == "scale_out" && state_[i].fired) return true;
  }
  return false;
}

}  // namespace dsinfer
