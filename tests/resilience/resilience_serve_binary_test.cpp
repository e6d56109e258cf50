// The resilience sections through the `dsinfer serve` binary (a subprocess on a loopback port): the issue's
// circuit_breaker YAML starts the server; a fault_injection section needs --enable-fault-injection; bad keys
// and units stop start-up with a message naming them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../server/http_test_client.h"
#include "../server/subprocess.h"
#include "issue_yaml.h"

namespace dsinfer::testing {
namespace {

using namespace std::chrono_literals;

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

const std::string kIssueYaml = issue_circuit_breaker_yaml();

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> serve_args(const std::string& config, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {DSINFER_BINARY, "serve", "--model",  kModel, "--port", "0",
                                "--device",     "cpu",   "--config", config};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(ResilienceServeBinaryTest, IssueYamlStartsAndReportsBreakerMetrics) {
  const std::string cfg = write_config("dsinfer_resilience_issue.yaml", kIssueYaml);
  Subprocess server(serve_args(cfg));
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  EXPECT_EQ(get(port, "/health/ready").status, 200);
  const std::string metrics = get(port, "/metrics").body;
  EXPECT_NE(metrics.find("\ndsinfer_circuit_breaker_state 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ndsinfer_fallback_level 0"), std::string::npos);
  EXPECT_NE(metrics.find("dsinfer_step_errors_total{type=\"CUDA_ERROR\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("\ndsinfer_scale_out_recommended 0"), std::string::npos);
  server.signal(SIGTERM);
  const auto status = server.wait_exit(30s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << server.log();
}

TEST(ResilienceServeBinaryTest, FaultInjectionNeedsTheFlag) {
  const std::string cfg =
      write_config("dsinfer_resilience_faults.yaml",
                   std::string(kIssueYaml) + "fault_injection: {step_error_rate: 0.2, seed: 1}\n");
  {
    Subprocess server(serve_args(cfg));
    const auto status = server.wait_exit(30s);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(*status, 1);
    EXPECT_NE(server.log().find("--enable-fault-injection"), std::string::npos) << server.log();
  }
  Subprocess server(serve_args(cfg, {"--enable-fault-injection"}));
  const int port = server.wait_for_port(60s);
  // The warm-up request may hit injected faults; it is retried, so the server still gets ready.
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  EXPECT_NE(server.log().find("FAULT INJECTION is on"), std::string::npos);
  EXPECT_EQ(get(port, "/health/live").status, 200);
  // Every accepted request ends: 200, or 503 naming the step error class after max_step_retries failed
  // steps. With the issue's threshold (3 errors / 60 s) the breaker degrades and opens: later requests are
  // refused with 503 circuit_open + Retry-After (not accepted).
  int completed = 0, errored = 0, refused = 0;
  for (int i = 0; i < 8; ++i) {
    const HttpResult r =
        post(port, "/v1/completions",
             R"({"prompt": "def f(x):", "max_tokens": 8, "temperature": 0, "ignore_eos": true})");
    if (r.status == 200) {
      ++completed;
    } else if (r.body.find("circuit_open") != std::string::npos) {
      EXPECT_EQ(r.status, 503);
      EXPECT_TRUE(r.headers.count("retry-after"));
      ++refused;
    } else {
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_NE(r.body.find("CUDA_ERROR"), std::string::npos) << r.body;
      ++errored;
    }
  }
  EXPECT_EQ(completed + errored + refused, 8);
  EXPECT_GT(completed, 0);
  // Engine stats are published after each engine loop pass: poll (bounded) for the blocks to be back.
  std::string metrics = get(port, "/metrics").body;
  for (int i = 0; i < 100 && metrics.find("\ndsinfer_kv_blocks_used 0") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
    metrics = get(port, "/metrics").body;
  }
  EXPECT_NE(metrics.find("\ndsinfer_kv_blocks_used 0"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("dsinfer_step_errors_total{type=\"CUDA_ERROR\"} 0\n"), std::string::npos) << metrics;
  if (refused > 0) {
    EXPECT_NE(server.log().find("circuit breaker: degraded -> open"), std::string::npos) << server.log();
  }
  std::printf("serve binary, step_error_rate 0.2: %d completed, %d errored, %d refused by the open breaker\n",
              completed, errored, refused);
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait_exit(30s).has_value());
}

TEST(ResilienceServeBinaryTest, BadValuesStopStartUpNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"circuit_breaker: {sliding_window: 10x}\n", "circuit_breaker.sliding_window"},
      {"circuit_breaker: {error_threshold: 3 per minute}\n", "circuit_breaker.error_threshold"},
      {"circuit_breaker: {error_types: [CUDA_EROR]}\n", "CUDA_EROR"},
      {"circuit_breaker: {fallback_strategies: [{type: reboot}]}\n", "reboot"},
      {"circuit_breaker: {max_latency: 500}\n", "circuit_breaker.max_latency"},
      {"length_tiers: {long_prefill_share: 2}\n", "length_tiers.long_prefill_share"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string cfg =
        write_config("dsinfer_resilience_bad" + std::to_string(i) + ".yaml", cases[i].first);
    Subprocess server(serve_args(cfg));
    const auto status = server.wait_exit(30s);
    ASSERT_TRUE(status.has_value()) << cases[i].first;
    EXPECT_EQ(*status, 1) << cases[i].first;
    EXPECT_NE(server.log().find(cases[i].second), std::string::npos) << cases[i].first << server.log();
  }
}

}  // namespace
}  // namespace dsinfer::testing
