// Load test of the HTTP server: starts `Server` in-process on an ephemeral 127.0.0.1 port with the engine of
// Engine::create (default: the bundled tiny model on the CPU), drives it with C keep-alive client threads for
// at most N requests and D seconds, and reports requests/s, tokens/s and latency / TTFT percentiles, plus
// what the server's metrics registry counted. Loopback only; bounded in count and time.
//   ./build/bench/server_load_bench [--requests 200] [--concurrency 16] [--max-tokens 32] [--stream]
//                                    [--duration 60] [--model DIR]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../tests/server/http_test_client.h"
#include "dsinfer/engine.h"
#include "server/server.h"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";
  int requests = 200, concurrency = 16, max_tokens = 32;
  double duration = 60.0;
  bool stream = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--requests")
      requests = std::stoi(next());
    else if (a == "--concurrency")
      concurrency = std::stoi(next());
    else if (a == "--max-tokens")
      max_tokens = std::stoi(next());
    else if (a == "--duration")
      duration = std::stod(next());
    else if (a == "--model")
      model = next();
    else if (a == "--stream")
      stream = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }

  dsinfer::server::ServeConfig config;
  config.server.host = "127.0.0.1";
  config.server.port = 0;
  config.server.request_log_level = "debug";
  config.engine.model_dir = model;
  config.engine.device = "cpu";
  config.engine.max_queue_length = std::max(1024, requests);
  std::unique_ptr<dsinfer::Engine> engine = dsinfer::Engine::create(config.engine);
  dsinfer::server::Server server(config);
  const int port = server.listen();
  server.set_engine(engine.get());
  server.set_phase(dsinfer::server::Phase::kReady);
  std::thread io([&]() { server.run(); });

  std::atomic<int> next{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int> errors{0};
  std::vector<std::vector<double>> latency(concurrency), ttft(concurrency);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&, c]() {
      std::unique_ptr<dsinfer::testing::RawConnection> conn;
      for (;;) {
        const int i = next.fetch_add(1);
        if (i >= requests || Clock::now() >= deadline) return;
        nlohmann::json body = {{"prompt", "def task_" + std::to_string(i) + "(x):"},
                               {"max_tokens", max_tokens},
                               {"temperature", 0},
                               {"ignore_eos", true},
                               {"stream", stream}};
        try {
          if (!conn) conn = std::make_unique<dsinfer::testing::RawConnection>(port);
          const Clock::time_point t0 = Clock::now();
          conn->send_all(dsinfer::testing::http_request_text("POST", "/v1/completions", body.dump()));
          dsinfer::testing::HttpResult r = conn->read_response();
          const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
          if (r.status != 200) {
            ++errors;
            conn.reset();
            continue;
          }
          latency[c].push_back(secs);
          if (stream) {
            // TTFT is measured by the server (dsinfer_time_to_first_token_seconds); count tokens from chunks.
            int64_t n = 0;
            for (const auto& p : dsinfer::testing::sse_payloads(r.body)) n += p != "[DONE]";
            tokens += std::max<int64_t>(0, n - 1);
          } else {
            tokens += nlohmann::json::parse(r.body)["usage"]["completion_tokens"].get<int64_t>();
          }
        } catch (const std::exception& e) {
          ++errors;
          conn.reset();
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& v : latency) all.insert(all.end(), v.begin(), v.end());

  server.stop();
  io.join();
  engine->shutdown(std::chrono::milliseconds(1000));
  // Read after the I/O thread stopped: every request's accounting is done.
  const auto ttft_hist = server.registry().histogram_snapshot("dsinfer_time_to_first_token_seconds");
  std::printf("server load test: %d clients, %zu requests ok, %d errors, %s, max_tokens %d, model %s\n",
              concurrency, all.size(), errors.load(), stream ? "streaming" : "non-streaming", max_tokens,
              model.c_str());
  std::printf("  wall %.2f s, %.1f requests/s, %.0f generated tokens/s\n", wall, all.size() / wall,
              tokens.load() / wall);
  std::printf("  latency p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n", percentile(all, 50) * 1e3,
              percentile(all, 90) * 1e3, percentile(all, 99) * 1e3, percentile(all, 100) * 1e3);
  std::printf("  server metrics: mean TTFT %.1f ms over %llu requests, long-tail requests %.0f, 200s %.0f\n",
              ttft_hist.count ? ttft_hist.sum / static_cast<double>(ttft_hist.count) * 1e3 : 0.0,
              static_cast<unsigned long long>(ttft_hist.count),
              server.registry().value("dsinfer_long_tail_requests_total"),
              server.registry().value("dsinfer_requests_total", {{"status", "200"}}));
  return errors.load() == 0 ? 0 : 1;
}
