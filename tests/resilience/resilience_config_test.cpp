// Tests of the resilience sections of the serve config file: the issue's YAML is accepted as written, and
// wrong keys, units and values are rejected with messages naming them.
#include <gtest/gtest.h>

#include "core/error.h"
#include "issue_yaml.h"
#include "server/serve_config.h"

namespace dsinfer {
namespace {

const std::string kIssueYaml = issue_circuit_breaker_yaml();

server::ServeConfig load(const std::string& text) {
  server::ServeConfig c;
  server::load_config_text(text, "test.yaml", c);
  server::validate(c);
  return c;
}

// Expects loading + validation to fail with a message containing every needle.
void expect_rejected(const std::string& text, const std::vector<std::string>& needles) {
  try {
    load(text);
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const Error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(ResilienceConfigTest, AcceptsTheIssueYamlAsWritten) {
  const CircuitBreakerConfig b = load(kIssueYaml).engine.resilience.circuit_breaker;
  EXPECT_TRUE(b.enabled);
  EXPECT_EQ(b.max_latency_ms, 500);
  EXPECT_EQ(b.sliding_window_ms, 10000);
  EXPECT_EQ(b.error_threshold, 3);
  EXPECT_EQ(b.error_window_ms, 60000);
  ASSERT_EQ(b.error_types.size(), 2u);
  EXPECT_EQ(b.error_types[0], StepErrorType::kCudaError);
  EXPECT_EQ(b.error_types[1], StepErrorType::kTimeout);
  ASSERT_EQ(b.fallback_strategies.size(), 2u);
  EXPECT_EQ(b.fallback_strategies[0].type, "reduce_batch_size");
  EXPECT_EQ(b.fallback_strategies[0].min_batch, 2);
  EXPECT_EQ(b.fallback_strategies[0].step, 2);
  EXPECT_EQ(b.fallback_strategies[1].type, "switch_precision");
  EXPECT_EQ(b.fallback_strategies[1].target, "bf16");
  ASSERT_EQ(b.metrics_rules.size(), 2u);
  EXPECT_EQ(b.metrics_rules[0].metric, "gpu_utilization");
  EXPECT_TRUE(b.metrics_rules[0].greater);
  EXPECT_DOUBLE_EQ(b.metrics_rules[0].threshold, 0.9);
  EXPECT_EQ(b.metrics_rules[0].for_ms, 30000);
  EXPECT_EQ(b.metrics_rules[0].action, "scale_out");
  EXPECT_DOUBLE_EQ(b.metrics_rules[1].threshold, 0.25);
  EXPECT_EQ(b.metrics_rules[1].for_ms, 0);
  EXPECT_EQ(b.metrics_rules[1].action, "reinit_cache");
}

TEST(ResilienceConfigTest, NoSectionLeavesTheBreakerOff) {
  EXPECT_FALSE(load("server: {port: 0}\n").engine.resilience.circuit_breaker.enabled);
}

TEST(ResilienceConfigTest, OtherSections) {
  const ResilienceConfig r =
      load(R"(watchdog: {step_timeout: 2s, hang_timeout: 1m, request_timeout: 90s, max_step_retries: 5}
length_tiers: {enabled: true, long_prompt_tokens: 1500, long_prefill_share: 0.125}
)")
          .engine.resilience;
  EXPECT_EQ(r.watchdog.step_timeout_ms, 2000);
  EXPECT_EQ(r.watchdog.hang_timeout_ms, 60000);
  EXPECT_EQ(r.watchdog.request_timeout_ms, 90000);
  EXPECT_EQ(r.watchdog.max_step_retries, 5);
  EXPECT_TRUE(r.length_tiers.enabled);
  EXPECT_EQ(r.length_tiers.long_prompt_tokens, 1500);
  EXPECT_DOUBLE_EQ(r.length_tiers.long_prefill_share, 0.125);
}

TEST(ResilienceConfigTest, RejectsBadVariantsNamingTheProblem) {
  const std::string y = kIssueYaml;
  expect_rejected(replace(y, "sliding_window: 10s", "sliding_window: 10x"),
                  {"circuit_breaker.sliding_window", "unit \"x\""});
  expect_rejected(replace(y, "sliding_window: 10s", "sliding_window: 10"),
                  {"circuit_breaker.sliding_window", "needs a unit"});
  expect_rejected(replace(y, "sliding_window:", "sliding_windw:"),
                  {"unknown key \"circuit_breaker.sliding_windw\""});
  expect_rejected(replace(y, "error_threshold: 3/60s", "error_threshold: three"),
                  {"circuit_breaker.error_threshold", "three"});
  expect_rejected(replace(y, "error_threshold: 3/60s", "error_threshold: 3/60q"),
                  {"error_threshold", "\"q\""});
  expect_rejected(replace(y, "[CUDA_ERROR, TIMEOUT]", "[CUDA_ERROR, TIMEOUTS]"),
                  {"circuit_breaker.error_types", "TIMEOUTS"});
  expect_rejected(replace(y, "type: reduce_batch_size", "type: reduce_batch"),
                  {"fallback_strategies[0]", "reduce_batch"});
  expect_rejected(replace(y, "{min_batch: 2, step: 2}", "{min_batch: 0, step: 2}"),
                  {"fallback_strategies[0].params.min_batch"});
  expect_rejected(replace(y, "{min_batch: 2, step: 2}", "{min_batch: 2, stride: 2}"),
                  {"fallback_strategies[0]", "stride"});
  expect_rejected(replace(y, "{target: bf16}", "{target: int3}"),
                  {"fallback_strategies[1].params.target", "int3"});
  expect_rejected(replace(y, "metric: gpu_utilization", "metric: gpu_temp"),
                  {"metrics_rules[0]", "gpu_temp"});
  expect_rejected(replace(y, "\">90% for 30s\"", "\"over 90%\""), {"metrics_rules[0].condition", "over 90%"});
  expect_rejected(replace(y, "\">90% for 30s\"", "\">190%\""), {"metrics_rules[0].condition"});
  expect_rejected(replace(y, "\">90% for 30s\"", "\">90% for 30 parsecs\""),
                  {"metrics_rules[0].condition", "parsecs"});
  expect_rejected(replace(y, "action: scale_out", "action: panic"), {"metrics_rules[0]", "panic"});
  expect_rejected(replace(y, "max_latency_ms: 500", "max_latency_ms: fast"),
                  {"circuit_breaker.max_latency_ms"});
  expect_rejected("fault_injection: {step_error_rate: 1.5}\n", {"fault_injection.step_error_rate"});
  expect_rejected("length_tiers: {long_prefill_share: 0}\n", {"length_tiers.long_prefill_share"});
  expect_rejected("watchdog: {step_timeout: 5s, hang_timeout: 1s}\n", {"watchdog.hang_timeout"});
}

TEST(ResilienceConfigTest, FaultInjectionNeedsTheFlag) {
  const server::ServeConfig c = load("fault_injection: {step_error_rate: 0.1, seed: 7}\n");
  EXPECT_TRUE(c.engine.resilience.fault_injection.enabled);
  EXPECT_EQ(c.engine.resilience.fault_injection.seed, 7u);
  try {
    check_fault_injection_allowed(c.engine.resilience, false);
    ADD_FAILURE() << "accepted without the flag";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--enable-fault-injection"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_fault_injection_allowed(c.engine.resilience, true));
  EXPECT_NO_THROW(check_fault_injection_allowed(load(kIssueYaml).engine.resilience, false));
}

}  // namespace
}  // namespace dsinfer
