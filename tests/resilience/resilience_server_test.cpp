// Fault-injection tests of the real server in-process (Server + the batched Engine on the CPU with
// models/deepseek-v3-tiny-code, loopback HTTP): every accepted request ends with a completion or a clear
// error, the circuit breaker trips at its threshold, degrades in order, opens (503 + Retry-After,
// /health/ready 503), probes and recovers; sticky device errors fail in-flight requests and liveness; slow
// steps are TIMEOUTs; no KV blocks leak. Every test is bounded in requests and time.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "../server/http_test_client.h"
#include "dsinfer/engine.h"
#include "server/server.h"

namespace dsinfer::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct RealServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::Server> srv;
  std::thread thread;
  int port = 0;

  explicit RealServer(const std::string& yaml) {
    server::ServeConfig config;
    server::load_config_text(yaml, "test.yaml", config);
    config.server.host = "127.0.0.1";
    config.server.port = 0;
    config.server.request_timeout_seconds = 60;
    config.engine.model_dir = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";
    config.engine.device = "cpu";
    config.engine.max_batch_size = 8;
    srv = std::make_unique<server::Server>(config);
    port = srv->listen();
    engine = Engine::create(config.engine);
    srv->set_engine(engine.get());
    srv->set_phase(server::Phase::kReady);
    thread = std::thread([this]() { srv->run(); });
  }
  ~RealServer() {
    srv->stop();
    if (thread.joinable()) thread.join();
    engine->shutdown(std::chrono::milliseconds(0));
    srv->set_engine(nullptr);
    srv.reset();
    engine.reset();
  }

  // A metric's value from /metrics (series written exactly, e.g. dsinfer_step_errors_total{type="TIMEOUT"}).
  double metric(const std::string& series) const {
    const std::string text = get(port, "/metrics").body;
    size_t at = 0;
    while ((at = text.find(series + " ", at)) != std::string::npos) {
      if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
      at += series.size();
    }
    return -1;
  }
  // Waits (bounded) until `series` equals `value`.
  bool wait_metric(const std::string& series, double value, std::chrono::milliseconds timeout = 10s) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (metric(series) == value) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

std::string completion(int max_tokens, const std::string& prompt = "def main():") {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}
      .dump();
}

struct Tally {
  int completed = 0, errored = 0, refused = 0, other = 0;
};

// Classifies one answer: 200 completed; 503 circuit_open/engine_failed refused (never accepted); 503/504
// with "generation failed" errored.
void classify(const HttpResult& r, Tally& t) {
  if (r.status == 200) {
    ++t.completed;
    return;
  }
  const json body = json::parse(r.body);
  const std::string code = body["error"]["code"].is_string() ? body["error"]["code"].get<std::string>() : "";
  if (r.status == 503 && (code == "circuit_open" || code == "engine_failed")) {
    ++t.refused;
  } else if ((r.status == 503 || r.status == 504) && r.body.find("generation failed") != std::string::npos) {
    ++t.errored;
  } else {
    ++t.other;
    ADD_FAILURE() << r.status << " " << r.body;
  }
}

TEST(ResilienceServerTest, RandomFaultsEveryAcceptedRequestEnds) {
  RealServer s(R"(fault_injection: {step_error_rate: 0.3, alloc_failure_rate: 0.1, seed: 42}
watchdog: {max_step_retries: 2}
circuit_breaker: {error_threshold: 1000/60s}
)");
  constexpr int kRequests = 24;
  std::vector<std::future<HttpResult>> answers;
  for (int i = 0; i < kRequests; ++i) {
    answers.push_back(std::async(std::launch::async, [&s, i]() {
      return post(s.port, "/v1/completions", completion(6 + i % 5, "def f" + std::to_string(i) + "(x):"));
    }));
  }
  Tally t;
  for (auto& a : answers) {
    ASSERT_EQ(a.wait_for(60s), std::future_status::ready) << "a request hung";
    classify(a.get(), t);
  }
  std::printf("random faults: %d requests: %d completed, %d errored, %d refused\n", kRequests, t.completed,
              t.errored, t.refused);
  EXPECT_EQ(t.completed + t.errored + t.refused, kRequests);
  EXPECT_EQ(t.refused, 0);
  EXPECT_GT(t.completed, 0);
  EXPECT_GT(s.metric("dsinfer_step_errors_total{type=\"CUDA_ERROR\"}"), 0);
  EXPECT_GT(s.metric("dsinfer_step_errors_total{type=\"OUT_OF_MEMORY\"}"), 0);
  EXPECT_TRUE(s.wait_metric("dsinfer_kv_blocks_used", 0)) << s.metric("dsinfer_kv_blocks_used");
  EXPECT_TRUE(s.wait_metric("dsinfer_num_requests_running", 0));
}

TEST(ResilienceServerTest, BreakerTripsDegradesInOrderOpensAndRecovers) {
  // Steps 4..12 fail: three breaches of 3 errors each -> level 1, level 2, open.
  RealServer s(R"(fault_injection: {fail_after_steps: 3, fail_steps: 9}
watchdog: {max_step_retries: 100}
circuit_breaker:
  error_threshold: 3/60s
  error_types: [CUDA_ERROR, TIMEOUT]
  fallback_strategies:
    - type: reduce_batch_size
      params: {min_batch: 2, step: 2}
    - type: switch_precision
      params: {target: bf16}
  cooldown: 3s
  half_open_probes: 1
  recovery_interval: 1s
)");
  EXPECT_EQ(s.metric("dsinfer_circuit_breaker_state"), 0);
  // The in-flight request survives the failing steps (retried) and finishes.
  const HttpResult first = post(s.port, "/v1/completions", completion(12));
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(s.metric("dsinfer_step_errors_total{type=\"CUDA_ERROR\"}"), 9);
  EXPECT_EQ(s.metric("dsinfer_circuit_breaker_state"), 2);  // open
  EXPECT_EQ(s.metric("dsinfer_fallback_level"), 2);
  EXPECT_EQ(s.metric("dsinfer_circuit_breaker_transitions_total"), 3);  // L1, L2, open
  EXPECT_TRUE(s.wait_metric("dsinfer_batch_limit", 4, 2s));             // reduce_batch_size: max(2, 8 / 2)
  // Open: new requests get 503 + Retry-After; not ready; still live.
  const HttpResult refused = post(s.port, "/v1/completions", completion(4));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("circuit_open"), std::string::npos) << refused.body;
  EXPECT_TRUE(refused.headers.count("retry-after"));
  EXPECT_EQ(get(s.port, "/health/ready").status, 503);
  EXPECT_EQ(get(s.port, "/health/live").status, 200);
  // After the cool-down a probe is let through, succeeds and closes the breaker (fallbacks still applied).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  HttpResult probe;
  do {
    std::this_thread::sleep_for(200ms);
    probe = post(s.port, "/v1/completions", completion(4));
  } while (probe.status == 503 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(probe.status, 200) << probe.body;
  EXPECT_EQ(get(s.port, "/health/ready").status, 200);
  // Healthy for a recovery interval per level: back to closed, level 0.
  EXPECT_TRUE(s.wait_metric("dsinfer_fallback_level", 0, 8s));
  EXPECT_EQ(s.metric("dsinfer_circuit_breaker_state"), 0);
  EXPECT_EQ(s.metric("dsinfer_batch_limit"), 0);
  EXPECT_TRUE(s.wait_metric("dsinfer_kv_blocks_used", 0));
}

TEST(ResilienceServerTest, StickyDeviceErrorFailsInFlightRequestsAndLiveness) {
  RealServer s("fault_injection: {sticky_error_after_steps: 3}\n");
  EXPECT_EQ(get(s.port, "/health/live").status, 200);
  const HttpResult r = post(s.port, "/v1/completions", completion(16));
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("STICKY_CUDA_ERROR"), std::string::npos) << r.body;
  EXPECT_EQ(get(s.port, "/health/live").status, 503);
  EXPECT_EQ(get(s.port, "/health/ready").status, 503);
  const HttpResult after = post(s.port, "/v1/completions", completion(4));
  EXPECT_EQ(after.status, 503);
  EXPECT_NE(after.body.find("engine_failed"), std::string::npos) << after.body;
  EXPECT_EQ(s.metric("dsinfer_step_errors_total{type=\"STICKY_CUDA_ERROR\"}"), 1);
  EXPECT_TRUE(s.wait_metric("dsinfer_kv_blocks_used", 0));
}

TEST(ResilienceServerTest, SlowStepsAreTimeoutsAndRequestTimeoutsFail) {
  RealServer s(R"(fault_injection: {step_delay_ms: 40}
watchdog: {step_timeout: 10ms, hang_timeout: 30s, request_timeout: 400ms}
)");
  const HttpResult quick = post(s.port, "/v1/completions", completion(2));
  EXPECT_EQ(quick.status, 200) << quick.body;  // slow steps still produce tokens
  EXPECT_GE(s.metric("dsinfer_step_errors_total{type=\"TIMEOUT\"}"), 2);
  const HttpResult slow = post(s.port, "/v1/completions", completion(100));
  EXPECT_EQ(slow.status, 504) << slow.body;
  EXPECT_NE(slow.body.find("watchdog.request_timeout"), std::string::npos) << slow.body;
  EXPECT_EQ(s.metric("dsinfer_request_timeouts_total"), 1);
  EXPECT_TRUE(s.wait_metric("dsinfer_kv_blocks_used", 0));
  EXPECT_EQ(get(s.port, "/health/live").status, 200);
}

TEST(ResilienceServerTest, MetricsRulesRecommendScaleOutAndResetTheCache) {
  RealServer s(R"(fault_injection: {step_delay_ms: 5}
circuit_breaker:
  sliding_window: 1s
  metrics_rules:
    - metric: gpu_utilization
      condition: ">50% for 300ms"
      action: scale_out
    - metric: memory_fragmentation
      condition: ">1%"
      action: reinit_cache
)");
  EXPECT_EQ(s.metric("dsinfer_scale_out_recommended"), 0);
  auto busy =
      std::async(std::launch::async, [&s]() { return post(s.port, "/v1/completions", completion(200)); });
  EXPECT_TRUE(s.wait_metric("dsinfer_scale_out_recommended", 1, 20s));
  EXPECT_EQ(busy.get().status, 200);
  EXPECT_GE(s.metric("dsinfer_cache_reinits_total"), 1);
  EXPECT_TRUE(s.wait_metric("dsinfer_scale_out_recommended", 0, 10s));  // idle: the rule clears
  EXPECT_TRUE(s.wait_metric("dsinfer_kv_blocks_used", 0));
}

}  // namespace
}  // namespace dsinfer::testing
