// Configuration of dsinfer's resilience layer: the circuit breaker (with its fallback strategies and
// metrics rules), the step watchdog / per-request timeouts, length tiers and test-only fault injection.
// These are the `circuit_breaker:`, `watchdog:`, `length_tiers:` and `fault_injection:` sections of the
// `dsinfer serve --config` YAML file (docs/configuration.md). Durations are milliseconds here.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsinfer {

// Step error classes (the names are the YAML spelling and the `type` label of dsinfer_step_errors_total).
enum class StepErrorType { kCudaError, kOutOfMemory, kTimeout, kStickyCudaError };
inline constexpr StepErrorType kAllStepErrorTypes[] = {StepErrorType::kCudaError, StepErrorType::kOutOfMemory,
                                                       StepErrorType::kTimeout,
                                                       StepErrorType::kStickyCudaError};
const char* to_string(StepErrorType type);
// Throws dsinfer::Error listing the known names.
StepErrorType parse_step_error_type(const std::string& name);

struct FallbackStrategy {
  std::string type;  // reduce_batch_size | switch_precision
  std::map<std::string, std::string> params;
  // reduce_batch_size: the batch limit becomes max(min_batch, max_batch_size / step).
  int32_t min_batch = 1;
  int32_t step = 2;
  // switch_precision: the weights' target precision.
  std::string target;
};

struct MetricsRule {
  std::string metric;     // gpu_utilization | memory_fragmentation
  std::string condition;  // as written, e.g. ">90% for 30s"
  std::string action;     // scale_out | reinit_cache
  bool greater = true;    // '>' (true) or '<'
  double threshold = 0;   // a ratio (90% -> 0.9)
  int64_t for_ms = 0;     // how long the condition must hold (0: at one evaluation)
};

struct CircuitBreakerConfig {
  bool enabled = false;        // true once a circuit_breaker section is given
  int64_t max_latency_ms = 0;  // mean step latency over the sliding window above this is a breach (0: off)
  int64_t sliding_window_ms = 10000;
  int32_t error_threshold = 0;  // errors of error_types within error_window_ms that trip (0: off)
  int64_t error_window_ms = 60000;
  std::vector<StepErrorType> error_types = {StepErrorType::kCudaError, StepErrorType::kOutOfMemory,
                                            StepErrorType::kTimeout, StepErrorType::kStickyCudaError};
  std::vector<FallbackStrategy> fallback_strategies;
  std::vector<MetricsRule> metrics_rules;
  int64_t cooldown_ms = 5000;            // open -> half-open
  int32_t half_open_probes = 2;          // successful requests in half-open that close the breaker
  int64_t recovery_interval_ms = 30000;  // healthy time that steps one fallback level back
  int32_t min_latency_samples = 5;       // steps in the window before latency can breach
};

struct WatchdogConfig {
  int64_t step_timeout_ms = 30000;   // a step running longer is a TIMEOUT (0: off)
  int64_t hang_timeout_ms = 120000;  // a step running longer makes /health/live fail (0: off)
  int64_t request_timeout_ms = 0;    // a request running longer fails with a TIMEOUT (0: no limit)
  int32_t max_step_retries = 3;      // failed steps a request survives before it fails
};

struct LengthTiersConfig {
  bool enabled = false;
  int32_t long_prompt_tokens = 1024;  // prompts with at least this many tokens are "long"
  double long_prefill_share = 0.25;   // most of a step's token budget that long prefills may take
};

struct FaultInjectionConfig {
  bool enabled = false;             // a fault_injection section was given (requires --enable-fault-injection)
  double step_error_rate = 0.0;     // probability that a step fails with a recoverable CUDA_ERROR
  int64_t step_delay_ms = 0;        // added to every step
  int64_t fail_after_steps = 0;     // > 0: steps after this many fail (CUDA_ERROR)
  int64_t fail_steps = 0;           // with fail_after_steps: how many steps fail (0: all later ones)
  double alloc_failure_rate = 0.0;  // probability that a step fails with OUT_OF_MEMORY
  int64_t sticky_error_after_steps = 0;  // > 0: the step after this many fails with a sticky device error
  uint64_t seed = 0;
};

struct ResilienceConfig {
  CircuitBreakerConfig circuit_breaker;
  WatchdogConfig watchdog;
  LengthTiersConfig length_tiers;
  FaultInjectionConfig fault_injection;
};

// Parsers of the YAML spellings; each throws dsinfer::Error naming `where` and the bad value.
int64_t parse_duration_ms(const std::string& text, const std::string& where);  // 500ms, 10s, 2m, 1h
void parse_rate(const std::string& text, const std::string& where, int32_t* count,
                int64_t* window_ms);                                                         // 3/60s
void parse_condition(const std::string& text, const std::string& where, MetricsRule* rule);  // >90% for 30s

// Fault injection is for tests only: a fault_injection section without --enable-fault-injection is an error.
void check_fault_injection_allowed(const ResilienceConfig& config, bool flag_given);

// Range and consistency checks (known strategy types, params, metrics, actions); throws naming the key.
void validate(const ResilienceConfig& config);

}  // namespace dsinfer
