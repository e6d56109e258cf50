// Resilience configuration: error type names, the duration / rate / condition spellings of the YAML file
// and the range checks.
#include "resilience/resilience_config.h"

#include <cctype>
#include <cmath>
#include <regex>

#include "core/error.h"

namespace dsinfer {

const char* to_string(StepErrorType type) {
  switch (type) {
    case StepErrorType::kCudaError:
      return "CUDA_ERROR";
    case StepErrorType::kOutOfMemory:
      return "OUT_OF_MEMORY";
    case StepErrorType::kTimeout:
      return "TIMEOUT";
    case StepErrorType::kStickyCudaError:
      return "STICKY_CUDA_ERROR";
  }
  return "UNKNOWN";
}

StepErrorType parse_step_error_type(const std::string& name) {
  for (StepErrorType t : kAllStepErrorTypes) {
    if (name == to_string(t)) return t;
  }
  fail("unknown error type \"", name, "\" (known: CUDA_ERROR, OUT_OF_MEMORY, TIMEOUT, STICKY_CUDA_ERROR)");
}

int64_t parse_duration_ms(const std::string& text, const std::string& where) {
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$)");
  std::smatch m;
  DSI_CHECK(std::regex_match(text, m, re), where, ": \"", text,
            "\" is not a duration (a number and a unit: ms, s, m or h, e.g. 10s)");
  const double value = std::stod(m[1].str());
  const std::string unit = m[2].str();
  double scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60000;
  } else if (unit == "h") {
    scale = 3600000;
  } else if (unit.empty()) {
    fail(where, ": \"", text, "\" needs a unit (ms, s, m or h, e.g. ", m[1].str(), "s)");
  } else {
    fail(where, ": unknown duration unit \"", unit, "\" in \"", text, "\" (use ms, s, m or h)");
  }
  return static_cast<int64_t>(std::llround(value * scale));
}

void parse_rate(const std::string& text, const std::string& where, int32_t* count, int64_t* window_ms) {
  static const std::regex re(R"(^\s*([0-9]+)\s*/\s*(.+)$)");
  std::smatch m;
  DSI_CHECK(std::regex_match(text, m, re), where, ": \"", text,
            "\" is not an error rate (COUNT/WINDOW, e.g. 3/60s)");
  *count = std::stoi(m[1].str());
  *window_ms = parse_duration_ms(m[2].str(), where);
}

void parse_condition(const std::string& text, const std::string& where, MetricsRule* rule) {
  static const std::regex re(R"(^\s*([<>])\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*(?:for\s+(.+?))?\s*$)");
  std::smatch m;
  DSI_CHECK(std::regex_match(text, m, re), where, ": \"", text,
            "\" is not a condition (\">N%\" or \"<N%\", optionally \"for DURATION\", e.g. \">90% for 30s\")");
  rule->greater = m[1].str() == ">";
  rule->threshold = std::stod(m[2].str());
  if (!m[3].str().empty()) rule->threshold /= 100.0;
  DSI_CHECK(rule->threshold >= 0 && rule->threshold <= 1, where, ": the threshold of \"", text,
            "\" must be a share between 0% and 100% (or 0..1)");
  rule->for_ms = m[4].matched ? parse_duration_ms(m[4].str(), where) : 0;
}

void check_fault_injection_allowed(const ResilienceConfig& c, bool flag_given) {
  DSI_CHECK(
      !c.fault_injection.enabled || flag_given,
      "the config file has a fault_injection section, which is for tests only: start dsinfer serve with "
      "--enable-fault-injection to use it (or remove the section)");
}

void validate(const ResilienceConfig& c) {
  const CircuitBreakerConfig& b = c.circuit_breaker;
  DSI_CHECK(b.max_latency_ms >= 0, "circuit_breaker.max_latency_ms must be >= 0, got ", b.max_latency_ms);
  DSI_CHECK(b.sliding_window_ms > 0, "circuit_breaker.sliding_window must be > 0");
  DSI_CHECK(b.error_threshold >= 0, "circuit_breaker.error_threshold must be >= 0");
  DSI_CHECK(b.error_window_ms > 0, "circuit_breaker.error_threshold: the window must be > 0");
  DSI_CHECK(b.cooldown_ms > 0, "circuit_breaker.cooldown must be > 0");
  DSI_CHECK(b.half_open_probes >= 1, "circuit_breaker.half_open_probes must be >= 1, got ",
            b.half_open_probes);
  DSI_CHECK(b.recovery_interval_ms > 0, "circuit_breaker.recovery_interval must be > 0");
  DSI_CHECK(b.min_latency_samples >= 1, "circuit_breaker.min_latency_samples must be >= 1");
  for (size_t i = 0; i < b.fallback_strategies.size(); ++i) {
    const FallbackStrategy& f = b.fallback_strategies[i];
    const std::string where = str_cat("circuit_breaker.fallback_strategies[", i, "]");
    if (f.type == "reduce_batch_size") {
      for (const auto& [k, v] : f.params) {
        DSI_CHECK(k == "min_batch" || k == "step", where, ": unknown param \"", k,
                  "\" for reduce_batch_size (known: min_batch, step)");
      }
      DSI_CHECK(f.min_batch >= 1, where, ".params.min_batch must be >= 1, got ", f.min_batch);
      DSI_CHECK(f.step >= 2, where, ".params.step (the divisor of the batch size) must be >= 2, got ",
                f.step);
    } else if (f.type == "switch_precision") {
      for (const auto& [k, v] : f.params) {
        DSI_CHECK(k == "target", where, ": unknown param \"", k, "\" for switch_precision (known: target)");
      }
      DSI_CHECK(f.target == "bf16" || f.target == "fp16" || f.target == "fp32", where,
                ".params.target must be bf16, fp16 or fp32, got \"", f.target, "\"");
    } else {
      fail(where, ": unknown fallback strategy type \"", f.type,
           "\" (known: reduce_batch_size, switch_precision)");
    }
  }
  for (size_t i = 0; i < b.metrics_rules.size(); ++i) {
    const MetricsRule& r = b.metrics_rules[i];
    const std::string where = str_cat("circuit_breaker.metrics_rules[", i, "]");
    DSI_CHECK(r.metric == "gpu_utilization" || r.metric == "memory_fragmentation", where,
              ": unknown metric \"", r.metric, "\" (known: gpu_utilization, memory_fragmentation)");
    DSI_CHECK(r.action == "scale_out" || r.action == "reinit_cache", where, ": unknown action \"", r.action,
              "\" (known: scale_out, reinit_cache)");
  }
  const WatchdogConfig& w = c.watchdog;
  DSI_CHECK(w.step_timeout_ms >= 0, "watchdog.step_timeout must be >= 0");
  DSI_CHECK(w.hang_timeout_ms >= 0, "watchdog.hang_timeout must be >= 0");
  DSI_CHECK(w.hang_timeout_ms == 0 || w.step_timeout_ms == 0 || w.hang_timeout_ms >= w.step_timeout_ms,
            "watchdog.hang_timeout must be >= watchdog.step_timeout");
  DSI_CHECK(w.request_timeout_ms >= 0, "watchdog.request_timeout must be >= 0");
  DSI_CHECK(w.max_step_retries >= 0, "watchdog.max_step_retries must be >= 0");
  const LengthTiersConfig& t = c.length_tiers;
  DSI_CHECK(t.long_prompt_tokens >= 1, "length_tiers.long_prompt_tokens must be >= 1, got ",
            t.long_prompt_tokens);
  DSI_CHECK(t.long_prefill_share > 0 && t.long_prefill_share <= 1,
            "length_tiers.long_prefill_share must be in (0, 1], got ", t.long_prefill_share);
  const FaultInjectionConfig& f = c.fault_injection;
  DSI_CHECK(f.step_error_rate >= 0 && f.step_error_rate <= 1,
            "fault_injection.step_error_rate must be in [0, 1], got ", f.step_error_rate);
  DSI_CHECK(f.alloc_failure_rate >= 0 && f.alloc_failure_rate <= 1,
            "fault_injection.alloc_failure_rate must be in [0, 1], got ", f.alloc_failure_rate);
  DSI_CHECK(f.step_delay_ms >= 0, "fault_injection.step_delay_ms must be >= 0");
  DSI_CHECK(f.fail_after_steps >= 0, "fault_injection.fail_after_steps must be >= 0");
  DSI_CHECK(f.fail_steps >= 0, "fault_injection.fail_steps must be >= 0");
  DSI_CHECK(f.sticky_error_after_steps >= 0, "fault_injection.sticky_error_after_steps must be >= 0");
}

}  // namespace dsinfer
