// Unit tests of the CircuitBreaker state machine on a fake clock: trips at the threshold, degrades one
// fallback level per breach, opens, refuses with Retry-After, probes after the cool-down, closes, and steps
// the fallbacks back after healthy recovery intervals. No sleeps.
#include "resilience/circuit_breaker.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsinfer {
namespace {

using namespace std::chrono_literals;
using TP = CircuitBreaker::TimePoint;

CircuitBreakerConfig issue_config() {
  CircuitBreakerConfig c;
  c.enabled = true;
  c.max_latency_ms = 500;
  c.sliding_window_ms = 10000;
  c.error_threshold = 3;
  c.error_window_ms = 60000;
  c.error_types = {StepErrorType::kCudaError, StepErrorType::kTimeout};
  FallbackStrategy a;
  a.type = "reduce_batch_size";
  FallbackStrategy b;
  b.type = "switch_precision";
  b.target = "bf16";
  c.fallback_strategies = {a, b};
  c.cooldown_ms = 5000;
  c.half_open_probes = 2;
  c.recovery_interval_ms = 30000;
  c.min_latency_samples = 3;
  return c;
}

struct Fixture {
  TP now = TP{} + 1000s;  // the fake clock
  CircuitBreaker breaker{issue_config(), now};
  std::vector<BreakerTransition> log;
  Fixture() {
    breaker.set_listener([this](const BreakerTransition& t) { log.push_back(t); });
  }
  void errors(int n, StepErrorType t = StepErrorType::kCudaError) {
    for (int i = 0; i < n; ++i) {
      now += 1s;
      breaker.record_error(t, now);
    }
  }
};

TEST(CircuitBreakerTest, TripsAtTheThresholdAndDegradesInOrderThenOpens) {
  Fixture f;
  f.errors(2);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.errors(1);  // the third error within 60 s
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
  EXPECT_EQ(f.breaker.level(), 1);
  f.errors(2);  // the window was cleared by the breach: 2 fresh errors are not enough
  EXPECT_EQ(f.breaker.level(), 1);
  f.errors(1);
  EXPECT_EQ(f.breaker.level(), 2);
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
  f.errors(3);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  EXPECT_EQ(f.breaker.level(), 2);
  ASSERT_EQ(f.log.size(), 3u);
  EXPECT_EQ(f.log[0].level_to, 1);
  EXPECT_EQ(f.log[1].level_to, 2);
  EXPECT_EQ(f.log[2].to, BreakerState::kOpen);
}

TEST(CircuitBreakerTest, ErrorsOutsideTheWindowOrOfOtherTypesDoNotTrip) {
  Fixture f;
  f.errors(2);
  f.now += 61s;
  f.errors(2);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.errors(5, StepErrorType::kOutOfMemory);  // not in error_types
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.errors(1, StepErrorType::kTimeout);
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
}

TEST(CircuitBreakerTest, OpenRefusesWithRetryAfterThenProbesAndCloses) {
  Fixture f;
  f.errors(9);
  ASSERT_EQ(f.breaker.state(), BreakerState::kOpen);
  CircuitBreaker::Admission a = f.breaker.admit(f.now);
  EXPECT_FALSE(a.allowed);
  EXPECT_DOUBLE_EQ(a.retry_after_seconds, 5.0);
  f.now += 3500ms;
  a = f.breaker.admit(f.now);
  EXPECT_FALSE(a.allowed);
  EXPECT_DOUBLE_EQ(a.retry_after_seconds, 2.0);
  f.now += 1500ms;  // the cool-down is over
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
  EXPECT_FALSE(f.breaker.admit(f.now).allowed);  // only two probes
  f.breaker.record_request(true, f.now);
  EXPECT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  f.breaker.record_request(true, f.now);
  // Closed for admissions, with every fallback still applied.
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
  EXPECT_EQ(f.breaker.level(), 2);
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
}

TEST(CircuitBreakerTest, AFailedProbeReopens) {
  Fixture f;
  f.errors(9);
  f.now += 5s;
  f.breaker.tick(f.now);
  ASSERT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  f.breaker.record_error(StepErrorType::kCudaError, f.now);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
  f.now += 5s;
  f.breaker.tick(f.now);
  ASSERT_EQ(f.breaker.state(), BreakerState::kHalfOpen);
  f.breaker.record_request(false, f.now);
  EXPECT_EQ(f.breaker.state(), BreakerState::kOpen);
}

TEST(CircuitBreakerTest, UnreportedProbesAreReofferedAfterACooldown) {
  Fixture f;
  f.errors(9);
  f.now += 5s;
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
  EXPECT_FALSE(f.breaker.admit(f.now).allowed);
  f.now += 5s;
  EXPECT_TRUE(f.breaker.admit(f.now).allowed);
}

TEST(CircuitBreakerTest, StepsFallbacksBackWhenHealthyLongEnough) {
  Fixture f;
  f.errors(9);
  f.now += 5s;
  f.breaker.tick(f.now);
  f.breaker.record_request(true, f.now);
  f.breaker.record_request(true, f.now);
  ASSERT_EQ(f.breaker.level(), 2);
  f.now += 29s;
  f.breaker.tick(f.now);
  EXPECT_EQ(f.breaker.level(), 2);
  f.now += 1s;
  f.breaker.tick(f.now);
  EXPECT_EQ(f.breaker.level(), 1);
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
  f.errors(1);  // an error resets the healthy period
  f.now += 29s;
  f.breaker.tick(f.now);
  EXPECT_EQ(f.breaker.level(), 1);
  f.now += 1s;
  f.breaker.tick(f.now);
  EXPECT_EQ(f.breaker.level(), 0);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
}

TEST(CircuitBreakerTest, LatencyBudgetOverTheSlidingWindow) {
  Fixture f;
  f.breaker.record_step(900ms, f.now);
  f.breaker.record_step(900ms, f.now);
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);  // fewer than min_latency_samples
  f.now += 11s;                                         // those two leave the window
  f.breaker.record_step(100ms, f.now);
  f.breaker.record_step(100ms, f.now);
  f.breaker.record_step(1000ms, f.now);  // mean 400 ms: within budget
  EXPECT_EQ(f.breaker.state(), BreakerState::kClosed);
  f.breaker.record_step(1000ms, f.now);  // mean 550 ms
  EXPECT_EQ(f.breaker.state(), BreakerState::kDegraded);
  EXPECT_EQ(f.breaker.level(), 1);
}

TEST(CircuitBreakerTest, NoFallbacksOpensOnTheFirstBreach) {
  CircuitBreakerConfig c = issue_config();
  c.fallback_strategies.clear();
  TP now = TP{} + 1s;
  CircuitBreaker b(c, now);
  for (int i = 0; i < 3; ++i) b.record_error(StepErrorType::kCudaError, now);
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

}  // namespace
}  // namespace dsinfer
