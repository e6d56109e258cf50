// State shared by the request handlers of one Server. Everything except `post` and the atomics is touched
// on the I/O thread only.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/log.h"
#include "dsinfer/engine.h"
#include "server/health.h"
#include "server/openai_request.h"
#include "server/serve_config.h"
#include "server/server_metrics.h"

namespace dsinfer::server {

class CompletionJob;

struct ServerContext {
  ServeConfig config;
  std::atomic<Engine*> engine{nullptr};
  std::string model_name;
  ModelLimits limits;
  ServerMetrics* metrics = nullptr;
  Health health;
  LogLevel request_log_level = LogLevel::kInfo;
  // Runs `fn` on the I/O thread (callable from any thread, e.g. the engine thread).
  std::function<void(std::function<void()>)> post;
  // I/O thread: runs `fn` after `seconds`; the returned function cancels it.
  std::function<std::function<void()>(double seconds, std::function<void()> fn)> schedule;
  // Generation requests in flight, by job number.
  std::map<uint64_t, std::shared_ptr<CompletionJob>> jobs;
  uint64_t next_job = 1;
};

}  // namespace dsinfer::server
