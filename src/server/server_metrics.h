// The dsinfer serving metrics (names are a public contract) on top of a MetricsRegistry: request counts by
// status, token counters, latency histograms, engine gauges refreshed from Engine::stats() at scrape time,
// and the long-tail counter (requests slower than 3x the running mean latency).
#pragma once
#include <functional>
#include <mutex>
#include <string>

#include "dsinfer/engine.h"
#include "server/metrics.h"

namespace dsinfer::server {

// Timings of one finished generation request, in seconds (negative: unknown).
struct RequestTimings {
  double ttft = -1.0;         // arrival at the server -> first token
  double tpot = -1.0;         // mean time per output token after the first
  double e2e = -1.0;          // arrival -> last event
  double queue_delay = -1.0;  // engine enqueue -> first scheduling
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
};

class ServerMetrics {
 public:
  // Long-tail detection needs this many finished requests before it judges one.
  static constexpr int kLongTailMinSamples = 5;
  static constexpr double kLongTailFactor = 3.0;

  explicit ServerMetrics(MetricsRegistry& registry);
  // Refreshes the engine gauges from `stats` at every scrape (pass an empty function to stop).
  void set_stats_source(std::function<bool(EngineStats*)> source);

  void count_request(int http_status);
  // Records a finished generation request; returns true when it counted as long-tail.
  bool record_generation(const RequestTimings& t);
  // Tool calls returned to clients, and call markup that could not be read (returned as text instead).
  void count_tool_calls(int64_t calls, int64_t unreadable);

  MetricsRegistry& registry() { return registry_; }

 private:
  void refresh();
  MetricsRegistry& registry_;
  std::mutex mu_;
  std::function<bool(EngineStats*)> stats_source_;
  double latency_sum_ = 0.0;
  int64_t latency_count_ = 0;
};

}  // namespace dsinfer::server
