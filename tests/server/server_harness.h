// Starts the HTTP server in-process on an ephemeral loopback port, serving a FakeEngine, for the server
// tests.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "fake_engine.h"
#include "server/server.h"

namespace dsinfer::testing {

inline std::string tiny_model_dir() {
  return std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";
}

struct ServerHarness {
  std::unique_ptr<FakeEngine> engine;
  std::unique_ptr<server::Server> srv;
  std::thread thread;
  int port = 0;

  explicit ServerHarness(const std::function<void(server::ServeConfig&)>& tweak = {},
                         FakeEngine::Options options = {}, bool ready = true) {
    server::ServeConfig config;
    config.server.host = "127.0.0.1";
    config.server.port = 0;
    config.server.request_log_level = "debug";
    config.engine.model_dir = tiny_model_dir();
    if (tweak) tweak(config);
    engine = std::make_unique<FakeEngine>(tiny_model_dir(), options);
    srv = std::make_unique<server::Server>(config);
    port = srv->listen();
    if (ready) {
      srv->set_engine(engine.get());
      srv->set_phase(server::Phase::kReady);
    }
    thread = std::thread([this]() { srv->run(); });
  }
  ~ServerHarness() {
    srv->stop();
    if (thread.joinable()) thread.join();
    engine->shutdown(std::chrono::milliseconds(0));
    srv.reset();
    engine.reset();
  }
};

// Polls cond every 5 ms until it holds or `timeout` passes; its last value.
inline bool wait_for(const std::function<bool()>& cond,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace dsinfer::testing
