// The public engine API: configure and start an Engine, submit generation requests from any thread, and
// receive each request's events (token/text deltas, finish, usage, errors) through a callback.
// The engine thread alone owns the scheduler, the KV cache and the backend.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampling_params.h"
#include "resilience/resilience_config.h"

namespace dsinfer {

class Tokenizer;
struct ModelConfig;

struct EngineConfig {
  std::string model_dir;
  std::string device = "auto";         // auto | cpu | cuda
  std::string cuda_arch = "auto";      // CUDA kernel path: auto | sm_90 | sm_80 (DSINFER_CUDA_ARCH)
  bool dummy_weights = false;          // random weights from config.json alone (benchmarks)
  int32_t max_batch_size = 64;         // sequences per step
  int32_t max_num_tokens = 2048;       // tokens per step (decode tokens + prefill chunks)
  bool enable_chunked_context = true;  // split long prompts across steps
  int32_t context_chunk_size = 512;    // tokens per prefill chunk (a multiple of kv_block_size is best)
  // Logits rows a step may spend scoring prompts (SamplingParams::prompt_logprobs): a scored prompt is
  // computed in chunks of at most this many positions, so a step's logits stay bounded.
  int32_t max_prompt_logprob_rows = 2048;
  int32_t kv_block_size = 64;                     // tokens per KV block
  int64_t max_tokens_in_paged_kv_cache = 0;       // > 0: KV capacity in tokens
  double kv_cache_free_gpu_mem_fraction = 0.9;    // GPU: share of the memory left after weights + workspace
  int64_t cpu_kv_cache_bytes = int64_t{1} << 30;  // CPU backend: KV byte budget
  bool enable_prefix_caching = true;
  int32_t max_queue_length = 1024;  // waiting requests beyond this are rejected
  bool cuda_graphs = true;  // GPU: replay decode steps as CUDA graphs (env DSINFER_CUDA_GRAPHS=0: off)
  // Largest decode batch replayed from a graph (0: max_batch_size; env DSINFER_CUDA_GRAPH_MAX_BATCH): larger
  // batches run eagerly, where a step's launches are a small share of its time and a capture per (batch,
  // context) bucket costs more than it saves; the graphs' pool is sized for this many sequences. 256: the
  // fastest of 256 / 512 / 1024 on V2-Lite's 1000-prompt workload at max batch 1024 (docs/benchmarks.md).
  int32_t cuda_graph_max_batch_size = 256;
  // GPU: at startup, record the decode graphs of every batch bucket (up to cuda_graph_max_batch_size) for
  // contexts up to this many tokens, so that no step of a request pays a capture (an eager step, the
  // capture and its instantiation) when its batch or context first reaches a bucket; 0: each graph is
  // recorded at its first step. Longer contexts' graphs are still recorded at first use.
  int32_t cuda_graph_precapture_context = 0;
  // GPU: launch step N+1 before step N's sampled tokens reach the host (they are fed in on the device), so
  // the host's per-request work and scheduling overlap the GPU's step (docs/architecture.md, "Scheduler
  // and engine loop"). The CPU backend runs synchronously: it takes the async path only when
  // async_scheduling_on_cpu is also set (tests).
  bool async_scheduling = true;
  bool async_scheduling_on_cpu = false;
  ResilienceConfig resilience;  // circuit breaker, watchdog, length tiers, fault injection
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the request's top_logprobs alternatives
};

// One event of a request's stream. The last event has finished == true (and carries usage).
struct RequestEvent {
  uint64_t request_id = 0;
  std::vector<int32_t> token_ids;  // new tokens since the previous event
  std::string text;                // new text (never a partial UTF-8 character, never part of a stop string)
  std::vector<TokenLogprob> logprobs;  // when requested, one per new token
  // With SamplingParams::prompt_logprobs, in the request's first event only: the score of every prompt token
  // after the first (entry i: prompt token i + 1 given tokens 0..i), with that many top alternatives.
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // non-empty: the request failed (finished is true)
  Usage usage;
  // Timing for metrics.
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point first_scheduled;
  std::chrono::steady_clock::time_point first_token;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  int32_t priority = 0;  // higher runs first; FCFS within a priority
  // Called on the engine thread for every event; must not block.
  std::function<void(const RequestEvent&)> on_event;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;    // held by live requests
  int64_t kv_blocks_cached = 0;  // prefix-cache blocks no request holds
  double kv_utilization = 0.0;
  double fragmentation = 0.0;  // allocated-but-unused token slots / allocated token slots
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t prefix_cache_hit_tokens = 0;
  double kv_utilization_peak = 0.0;  // highest kv_utilization after any step so far
  int32_t kv_block_size = 0;
  // Resilience (docs/architecture.md, "Resilience").
  bool breaker_enabled = false;
  int32_t breaker_state = 0;  // BreakerState: 0 closed, 1 degraded, 2 open, 3 half_open
  int32_t fallback_level = 0;
  int64_t breaker_transitions = 0;
  std::array<int64_t, 4> step_errors{};  // by StepErrorType (CUDA_ERROR, OUT_OF_MEMORY, TIMEOUT, STICKY)
  int64_t request_timeouts = 0;
  double engine_busy_fraction = 0.0;  // "gpu_utilization": busy share of the engine thread
  bool scale_out_recommended = false;
  int64_t cache_reinits = 0;
  int32_t batch_limit = 0;         // current cap on sequences per step (0: max_batch_size)
  int64_t cuda_graph_replays = 0;  // decode steps replayed from CUDA graphs
  // (batch, context) buckets whose CUDA graph could not be captured (out of memory, say): their decode
  // steps run eagerly, slower but correct; any rise is worth an alert.
  int64_t cuda_graph_capture_failures = 0;
  // Graphs captured so far and the host seconds their capturing steps spent launching the eager warm-up
  // step, capturing and instantiating: the one-time cost of a new (batch, context) bucket (the warm-up
  // step's GPU time comes on top).
  int64_t cuda_graph_captures = 0;
  double cuda_graph_capture_seconds = 0.0;
  // Async scheduling: tokens fed into a step from the previous step's sampling before the host saw them,
  // and entries of steps whose sequence ended before the step's results were read (their work is dropped).
  int64_t fed_tokens = 0;
  int64_t dropped_entries = 0;
};

// Whether a new request may start (the circuit breaker's gate and the device's health).
struct EngineAdmission {
  bool allowed = true;
  double retry_after_seconds = 0;
  std::string reason;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Loads the model and tokenizer and starts the engine thread.
  static std::unique_ptr<Engine> create(const EngineConfig& config);

  // Validates and enqueues; returns the request id. Throws dsinfer::Error for invalid requests
  // (bad sampling values, prompt + max_tokens beyond the context, queue full).
  virtual uint64_t submit(GenerationRequest request) = 0;
  // Validates every request, then enqueues them together, so that the scheduler sees them as one arrival
  // (the same steps run by run, whatever the caller's timing). All or none: a bad request
  // (its index in the message) or a queue without room for all of them throws and enqueues nothing.
  // Returns the ids in order.
  virtual std::vector<uint64_t> submit_all(std::vector<GenerationRequest> requests) = 0;
  // Cancels a request in any state; its blocks are freed at once and it gets a final event
  // (finish_reason kAbort / error "cancelled"). Unknown or finished ids are ignored.
  virtual void cancel(uint64_t request_id) = 0;
  virtual EngineStats stats() const = 0;
  // The circuit breaker's gate for new requests (always allowed without a circuit_breaker section). In
  // half-open it hands out the probe slots, so call it once per request that is then submitted.
  virtual EngineAdmission admission() { return {}; }
  // Non-empty once the engine is unusable (a sticky device error, or a step hung beyond
  // watchdog.hang_timeout): the process should be restarted (/health/live fails).
  virtual std::string fatal_error() const { return ""; }
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  // Stops accepting work, finishes what is running (cancels what remains after `timeout`), joins.
  virtual void shutdown(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) = 0;
};

}  // namespace dsinfer
