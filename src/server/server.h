// The OpenAI-compatible HTTP server of `dsinfer serve`: routes, health, metrics and the completion endpoints
// over one asynchronous I/O thread (Boost.Asio), serving an Engine that is attached once loaded.
#pragma once
#include <memory>
#include <string>

#include "dsinfer/engine.h"
#include "server/health.h"
#include "server/metrics.h"
#include "server/serve_config.h"
#include "server/server_metrics.h"

namespace dsinfer::server {

class Server {
 public:
  // `registry`: where the metrics live (null: a registry owned by the server).
  explicit Server(ServeConfig config, MetricsRegistry* registry = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds config.server.host:port (port 0: ephemeral) and starts accepting; returns the bound port.
  int listen();
  // Runs the I/O loop on the calling thread until stop() or the end of a drain.
  void run();

  // Attaches the engine (thread-safe; the engine must outlive run()). The readiness phase is separate.
  void set_engine(Engine* engine);
  void set_phase(Phase phase, const std::string& reason = "");
  // SIGTERM/SIGINT start a drain (a second signal stops at once). Call before run().
  void handle_signals();
  // Graceful: stop accepting, let in-flight requests finish (cancel them after drain_timeout), close, return
  // from run(). Thread-safe.
  void drain();
  // Immediate: cancel in-flight requests, close every connection, return from run(). Thread-safe.
  void stop();

  int port() const;
  const std::string& model_name() const;
  MetricsRegistry& registry();
  ServerMetrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::server
