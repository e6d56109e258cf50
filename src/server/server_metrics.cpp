// ServerMetrics: registration of the dsinfer metric families and their updates.
#include "server/server_metrics.h"

#include <string>
#include <vector>

namespace dsinfer::server {

namespace {

const std::vector<double>& latency_buckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.05, 0.1,  0.2,   0.5,  1.0,
                                        2.0,   5.0,   10.0, 20.0, 30.0, 60.0, 120.0, 300.0};
  return b;
}
const std::vector<double>& token_buckets() {
  static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.05,
                                        0.075, 0.1,    0.15,  0.2,    0.3,  0.5,   1.0,  2.5};
  return b;
}

constexpr const char* kTtft = "dsinfer_time_to_first_token_seconds";
constexpr const char* kTpot = "dsinfer_time_per_output_token_seconds";
constexpr const char* kE2e = "dsinfer_e2e_request_latency_seconds";
constexpr const char* kQueue = "dsinfer_scheduler_queue_delay_seconds";

// Raises counter `name` (registered in the constructor) to the engine's cumulative `total`; never lowers it.
void advance_counter(MetricsRegistry& registry, const char* name, double total) {
  Counter& c = registry.counter(name, "");
  if (total > c.value()) c.inc(total - c.value());
}

}  // namespace

ServerMetrics::ServerMetrics(MetricsRegistry& registry) : registry_(registry) {
  // Register every family up front so that a scrape before the first request shows them all.
  registry_.counter("dsinfer_prompt_tokens_total", "Prompt tokens of finished generation requests");
  registry_.counter("dsinfer_generation_tokens_total", "Generated tokens of finished generation requests");
  registry_.histogram(kTtft, "Time from request arrival to the first generated token", token_buckets());
  registry_.histogram(kTpot, "Mean time per output token after the first", token_buckets());
  registry_.histogram(kE2e, "Time from request arrival to its last token", latency_buckets());
  registry_.histogram(kQueue, "Time from engine enqueue to first scheduling", latency_buckets());
  registry_.gauge("dsinfer_num_requests_running", "Requests the engine is running");
  registry_.gauge("dsinfer_num_requests_waiting", "Requests waiting in the engine queue");
  registry_.gauge("dsinfer_kv_cache_usage_ratio", "Share of KV blocks in use (0..1)");
  registry_.gauge("dsinfer_kv_blocks_total", "KV cache blocks");
  registry_.gauge("dsinfer_kv_blocks_used", "KV blocks held by live requests");
  registry_.gauge("dsinfer_kv_blocks_cached", "Prefix-cache KV blocks that no live request holds");
  registry_.gauge("dsinfer_gpu_memory_fragmentation_ratio",
                  "Allocated-but-unused KV token slots / allocated KV token slots");
  registry_.counter("dsinfer_preemptions_total", "Requests preempted by the scheduler");
  registry_.counter("dsinfer_cuda_graph_replays_total", "Decode steps replayed from CUDA graphs");
  registry_.counter("dsinfer_cuda_graph_capture_failures_total",
                    "Batch buckets whose CUDA graph could not be captured (their decode steps run eagerly)");
  registry_.counter(
      "dsinfer_cuda_graph_captures_total",
      "CUDA graphs of decode steps recorded (at startup, then by the step that first meets a bucket)");
  registry_.counter("dsinfer_cuda_graph_capture_seconds_total",
                    "Host seconds spent recording CUDA graphs (the running streams stall meanwhile)");
  registry_.gauge("dsinfer_http_open_connections", "HTTP connections open now");
  registry_.counter("dsinfer_http_connections_rejected_total",
                    "Connections answered 503 too_many_connections because the connection limit was reached");
  registry_.counter("dsinfer_long_tail_requests_total",
                    "Requests whose end-to-end latency exceeded 3x the running mean latency");
  registry_.counter("dsinfer_tool_calls_total", "Function calls returned in chat answers (tool_calls)");
  registry_.counter("dsinfer_tool_call_parse_failures_total",
                    "Tool-call markup in answers that could not be read as a call (returned as text)");
  registry_.add_collector([this]() { refresh(); });
}

void ServerMetrics::count_tool_calls(int64_t calls, int64_t unreadable) {
  if (calls > 0) registry_.counter("dsinfer_tool_calls_total", "").inc(static_cast<double>(calls));
  if (unreadable > 0)
    registry_.counter("dsinfer_tool_call_parse_failures_total", "").inc(static_cast<double>(unreadable));
}

void ServerMetrics::set_stats_source(std::function<bool(EngineStats*)> source) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_source_ = std::move(source);
}

void ServerMetrics::refresh() {
  std::function<bool(EngineStats*)> source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    source = stats_source_;
  }
  EngineStats s;
  if (!source || !source(&s)) return;
  registry_.gauge("dsinfer_num_requests_running", "").set(s.running);
  registry_.gauge("dsinfer_num_requests_waiting", "").set(s.waiting);
  registry_.gauge("dsinfer_kv_cache_usage_ratio", "").set(s.kv_utilization);
  registry_.gauge("dsinfer_kv_blocks_total", "").set(static_cast<double>(s.kv_blocks_total));
  registry_.gauge("dsinfer_kv_blocks_used", "").set(static_cast<double>(s.kv_blocks_used));
  registry_.gauge("dsinfer_kv_blocks_cached", "").set(static_cast<double>(s.kv_blocks_cached));
  registry_.gauge("dsinfer_gpu_memory_fragmentation_ratio", "").set(s.fragmentation);
  // The engine's counts are cumulative: exposed as monotonic counters.
  advance_counter(registry_, "dsinfer_preemptions_total", static_cast<double>(s.preemptions));
  advance_counter(registry_, "dsinfer_cuda_graph_replays_total", static_cast<double>(s.cuda_graph_replays));
  advance_counter(registry_, "dsinfer_cuda_graph_capture_failures_total",
                  static_cast<double>(s.cuda_graph_capture_failures));
  advance_counter(registry_, "dsinfer_cuda_graph_captures_total", static_cast<double>(s.cuda_graph_captures));
  advance_counter(registry_, "dsinfer_cuda_graph_capture_seconds_total", s.cuda_graph_capture_seconds);
}

void ServerMetrics::count_request(int http_status) {
  registry_
      .counter("dsinfer_requests_total", "HTTP API requests by response status",
               {{"status", std::to_string(http_status)}})
      .inc();
}

bool ServerMetrics::record_generation(const RequestTimings& t) {
  registry_.counter("dsinfer_prompt_tokens_total", "").inc(static_cast<double>(t.prompt_tokens));
  registry_.counter("dsinfer_generation_tokens_total", "").inc(static_cast<double>(t.generation_tokens));
  if (t.ttft >= 0) registry_.histogram(kTtft, "", token_buckets()).observe(t.ttft);
  if (t.tpot >= 0) registry_.histogram(kTpot, "", token_buckets()).observe(t.tpot);
  if (t.queue_delay >= 0) registry_.histogram(kQueue, "", latency_buckets()).observe(t.queue_delay);
  if (t.e2e < 0) return false;
  registry_.histogram(kE2e, "", latency_buckets()).observe(t.e2e);
  bool long_tail = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (latency_count_ >= kLongTailMinSamples) {
      const double mean = latency_sum_ / static_cast<double>(latency_count_);
      long_tail = t.e2e > kLongTailFactor * mean;
    }
    latency_sum_ += t.e2e;
    ++latency_count_;
  }
  if (long_tail) registry_.counter("dsinfer_long_tail_requests_total", "").inc();
  return long_tail;
}

}  // namespace dsinfer::server
