// Tests of the `dsinfer serve` binary as a subprocess on a loopback port: SIGTERM drains in-flight streams
// and exits 0, greedy output over HTTP equals `dsinfer generate`, config file + flags, start-up errors, and
// the official openai npm client (skipped only when tests/server/node/node_modules is absent).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "http_test_client.h"
#include "subprocess.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

std::vector<std::string> serve_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {DSINFER_BINARY, "serve", "--model", kModel, "--port", "0", "--device", "cpu"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(ServeBinaryTest, SigtermDrainsInFlightStreamsAndExitsZero) {
  Subprocess server(serve_args({"--log-level", "info"}));
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  EXPECT_EQ(get(port, "/health/ready").status, 200);

  RawConnection stream(port);
  stream.send_all(
      http_request_text("POST", "/v1/completions",
                        R"({"prompt": "def main():", "max_tokens": 400, "temperature": 0, "stream": true})"));
  std::string got;
  while (got.find("data: ") == std::string::npos) got += stream.recv_some();
  server.signal(SIGTERM);
  ASSERT_TRUE(server.wait_for_line("draining", 10s)) << server.log();
  // The in-flight stream finishes normally.
  for (;;) {
    const std::string more = stream.recv_some(60s);
    if (more.empty()) break;
    got += more;
  }
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(got.find("0\r\n\r\n"), std::string::npos);  // the chunked body is complete
  const auto status = server.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << server.log();
  EXPECT_EQ(*status, 0) << server.log();
  EXPECT_NE(server.log().find("POST /v1/completions status=200"), std::string::npos) << server.log();
  EXPECT_THROW(RawConnection c(port), std::runtime_error);
}

TEST(ServeBinaryTest, GreedyOutputEqualsGenerate) {
  Subprocess server(serve_args());
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  for (const std::string prompt : {"def fib(n):", "import numpy as np\n", "class Stack:"}) {
    int rc = 0;
    const std::string out =
        run_capture(std::string(DSINFER_BINARY) + " generate --device cpu --model " + kModel +
                        " --max-tokens 24 --json --prompt " + shell_quote(prompt),
                    &rc);
    ASSERT_EQ(rc, 0) << out;
    const json expected = json::parse(out);
    json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
    HttpResult r = post(port, "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["choices"][0]["text"], expected["text"]) << prompt;
    EXPECT_EQ(j["usage"]["completion_tokens"], expected["usage"]["completion_tokens"]);
    EXPECT_EQ(j["usage"]["prompt_tokens"], expected["usage"]["prompt_tokens"]);
  }
  // Chat: the same as `generate --chat`.
  int rc = 0;
  const std::string out = run_capture(std::string(DSINFER_BINARY) + " generate --device cpu --model " +
                                          kModel + " --max-tokens 16 --json --chat 'Sort a list in Python'",
                                      &rc);
  ASSERT_EQ(rc, 0) << out;
  json body = {{"messages", {{{"role", "user"}, {"content", "Sort a list in Python"}}}},
               {"max_tokens", 16},
               {"temperature", 0}};
  const json j = json::parse(post(port, "/v1/chat/completions", body.dump()).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], json::parse(out)["text"]);
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(30s), std::optional<int>(0));
}

TEST(ServeBinaryTest, ConfigFileFlagsWinAndUnknownKeysFail) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/serve_good.yaml";
  std::ofstream(good) << "server:\n  port: 1\n  served_model_name: from-yaml\n  api_key: yaml-key\nengine:\n "
                         " max_queue_length: 7\n";
  // --port 0 wins over the file's port 1; the rest comes from the file.
  Subprocess server(serve_args({"--config", good, "--api-key", "flag-key"}));
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  EXPECT_EQ(get(port, "/v1/models", {"Authorization: Bearer yaml-key"}).status, 401);
  HttpResult r = get(port, "/v1/models", {"Authorization: Bearer flag-key"});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["data"][0]["id"], "from-yaml");
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(30s), std::optional<int>(0));

  const std::string bad = dir + "/serve_bad.yaml";
  std::ofstream(bad) << "engine:\n  max_batch_size: 4\n  kv_blok_size: 16\n";
  Subprocess failing(serve_args({"--config", bad}));
  EXPECT_EQ(failing.wait_exit(30s), std::optional<int>(1));
  EXPECT_NE(failing.log().find("unknown key \"engine.kv_blok_size\""), std::string::npos) << failing.log();

  Subprocess no_model({DSINFER_BINARY, "serve", "--model", dir + "/no-such-model", "--port", "0"});
  EXPECT_EQ(no_model.wait_exit(30s), std::optional<int>(1));
}

TEST(ServeBinaryTest, OpenAiNpmClient) {
  const std::string node_dir = std::string(DSINFER_SOURCE_DIR) + "/tests/server/node";
  if (!std::filesystem::exists(node_dir + "/node_modules/openai")) {
    GTEST_SKIP()
        << "tests/server/node/node_modules is absent: run scripts/setup.sh (npm install) to enable this test";
  }
  Subprocess server(serve_args({"--api-key", "test-key"}));
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();
  int rc = 0;
  const std::string out = run_capture(
      "node " + shell_quote(node_dir + "/client_test.mjs") + " " + std::to_string(port) + " test-key 2>&1",
      &rc);
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << server.log();
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(30s), std::optional<int>(0));
}

}  // namespace
}  // namespace dsinfer::testing
