// `dsinfer serve`: the OpenAI-compatible HTTP server. Options come from --config FILE.yaml and flags (flags
// win); the listener starts at once (/health/live answers while the model loads), the engine is loaded and
// warmed up on a side thread, and SIGTERM drains in-flight requests before exiting 0 (at once while loading).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "server/serve_config.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string config_file;
  bool enable_fault_injection = false;  // allows a fault_injection: section (tests only)
  bool no_async_scheduling = false;     // wins over --async-scheduling and the file
  server::ServeConfig flags;            // values of the flags given
  std::vector<std::pair<CLI::Option*, std::function<void(server::ServeConfig&)>>> overrides;
};

// Registers `--name` bound to a field of ServeArgs::flags; when given it overrides the config file.
template <typename T>
void flag(CLI::App* cmd, ServeArgs& a, const std::string& name, const std::string& help,
          T* (*field)(server::ServeConfig&)) {
  T* storage = field(a.flags);
  CLI::Option* opt = cmd->add_option(name, *storage, help);
  a.overrides.emplace_back(opt, [field, storage](server::ServeConfig& c) { *field(c) = *storage; });
}

// Runs one short request so that the first client does not pay for lazy initialisation.
void warm_up(Engine& engine) {
  std::promise<std::string> done;
  GenerationRequest r;
  const auto bos = engine.tokenizer().bos_id();
  r.prompt_ids = {bos.value_or(0)};
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = 1;
  r.sampling.ignore_eos = true;
  r.on_event = [&done](const RequestEvent& ev) {
    if (ev.finished) done.set_value(ev.error);
  };
  engine.submit(std::move(r));
  const std::string error = done.get_future().get();
  DSI_CHECK(error.empty(), "warm-up request failed: ", error);
}

int run_serve(ServeArgs& a) {
  server::ServeConfig config;
  if (!a.config_file.empty()) server::load_config_file(a.config_file, config);
  for (auto& [opt, apply] : a.overrides) {
    if (opt->count() > 0) apply(config);
  }
  if (a.no_async_scheduling) config.engine.async_scheduling = false;
  config.engine.model_dir = a.model;
  check_fault_injection_allowed(config.engine.resilience, a.enable_fault_injection);
  server::validate(config);
  if (!config.server.log_level.empty()) set_log_level(parse_log_level(config.server.log_level));

  server::Server srv(config);
  const int port = srv.listen();
  srv.handle_signals();
  std::fprintf(stderr, "dsinfer serve: listening on http://%s:%d (model \"%s\")\n",
               config.server.host.c_str(), port, srv.model_name().c_str());

  std::unique_ptr<Engine> engine;
  int status = 0;
  std::atomic<bool> loaded{false};  // the loader thread is done (engine ready, or failed)
  std::thread loader([&]() {
    try {
      srv.set_phase(server::Phase::kLoading, "loading the model from " + config.engine.model_dir);
      engine = Engine::create(config.engine);
      srv.set_engine(engine.get());
      srv.set_phase(server::Phase::kWarmingUp, "warming up");
      warm_up(*engine);
      srv.set_phase(server::Phase::kReady);
      log_info("serve: model loaded and warmed up; ready");
      std::fprintf(stderr, "dsinfer serve: ready\n");
      loaded = true;
    } catch (const std::exception& e) {
      log_error("serve: cannot start the engine: ", e.what());
      srv.set_phase(server::Phase::kFailed, e.what());
      status = 1;
      loaded = true;  // before stop(): run() returning must not look like a stop during loading
      srv.stop();
    }
  });
  srv.run();
  if (!loaded) {
    // Stopped by a signal while the model loads or warms up: the loader (model/) has no point where it could
    // be cancelled and may take minutes, so the process exits now instead of joining it. The listener and
    // every connection are already closed; nothing was served.
    log_warn("serve: stopped while loading the model; exiting without waiting for the load");
    std::fprintf(stderr, "dsinfer serve: stopped while loading\n");
    std::fflush(nullptr);
    std::_Exit(0);
  }
  loader.join();
  if (engine) {
    engine->shutdown(
        std::chrono::milliseconds(static_cast<int64_t>(config.server.drain_timeout_seconds * 1000)));
  }
  srv.set_engine(nullptr);
  if (status == 0) std::fprintf(stderr, "dsinfer serve: stopped\n");
  return status;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  using C = server::ServeConfig;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer)")->required();
  cmd->add_option("--config", a->config_file, "YAML file with server: and engine: sections (flags win)");
  cmd->add_flag("--enable-fault-injection", a->enable_fault_injection,
                "Allow the config file's fault_injection: section (tests only)");
  ServeArgs& s = *a;
  flag<std::string>(cmd, s, "--host", "Address to listen on (127.0.0.1)",
                    [](C& c) { return &c.server.host; });
  flag<int>(cmd, s, "--port", "Port (8000; 0: any free port)", [](C& c) { return &c.server.port; });
  flag<std::string>(cmd, s, "--served-model-name",
                    "Model name in the API (default: the model directory's name)",
                    [](C& c) { return &c.server.served_model_name; });
  flag<std::string>(cmd, s, "--api-key", "Require \"Authorization: Bearer KEY\" on the API routes",
                    [](C& c) { return &c.server.api_key; });
  flag<int64_t>(cmd, s, "--max-body-bytes", "Largest request body (8 MiB)",
                [](C& c) { return &c.server.max_body_bytes; });
  flag<int64_t>(cmd, s, "--max-connections",
                "Open connections at most; more get 503 (0: the descriptor limit less 64)",
                [](C& c) { return &c.server.max_connections; });
  flag<double>(cmd, s, "--request-timeout", "Seconds a generation request may run (600; 0: no limit)",
               [](C& c) { return &c.server.request_timeout_seconds; });
  flag<double>(cmd, s, "--idle-timeout", "Seconds an idle or slow connection is kept (60)",
               [](C& c) { return &c.server.idle_timeout_seconds; });
  flag<double>(cmd, s, "--drain-timeout", "Seconds in-flight requests may take after SIGTERM (30)",
               [](C& c) { return &c.server.drain_timeout_seconds; });
  flag<double>(cmd, s, "--retry-after", "Retry-After seconds of 429 answers (1)",
               [](C& c) { return &c.server.retry_after_seconds; });
  flag<std::string>(cmd, s, "--log-level", "error, warn, info or debug",
                    [](C& c) { return &c.server.log_level; });
  flag<std::string>(cmd, s, "--request-log-level", "Level of the per-request log lines (info)",
                    [](C& c) { return &c.server.request_log_level; });
  flag<std::string>(cmd, s, "--reasoning-parser",
                    "Chat thinking (<think>) as reasoning_content: auto (when the tokenizer has the tags), "
                    "deepseek_r1 or none",
                    [](C& c) { return &c.server.reasoning_parser; });
  flag<std::string>(cmd, s, "--device", "auto, cpu or cuda", [](C& c) { return &c.engine.device; });
  flag<std::string>(cmd, s, "--cuda-arch", "CUDA kernel path: auto, sm_90 or sm_80 (forces Ampere on Hopper)",
                    [](C& c) { return &c.engine.cuda_arch; });
  flag<bool>(cmd, s, "--dummy-weights", "Random weights from config.json (benchmarks)",
             [](C& c) { return &c.engine.dummy_weights; });
  flag<int32_t>(cmd, s, "--max-batch-size", "Sequences per step (64)",
                [](C& c) { return &c.engine.max_batch_size; });
  flag<int32_t>(cmd, s, "--max-num-tokens", "Tokens per step (2048)",
                [](C& c) { return &c.engine.max_num_tokens; });
  flag<int32_t>(cmd, s, "--cuda-graph-max-batch-size",
                "GPU: largest decode batch replayed from a CUDA graph (256; 0: max_batch_size)",
                [](C& c) { return &c.engine.cuda_graph_max_batch_size; });
  flag<int32_t>(cmd, s, "--cuda-graph-precapture-context",
                "GPU: record the decode CUDA graphs for contexts up to this many tokens at startup (4096; 0: "
                "at first use)",
                [](C& c) { return &c.engine.cuda_graph_precapture_context; });
  flag<bool>(cmd, s, "--enable-chunked-context", "Split long prompts across steps (true)",
             [](C& c) { return &c.engine.enable_chunked_context; });
  flag<int32_t>(cmd, s, "--context-chunk-size", "Tokens per prefill chunk (512)",
                [](C& c) { return &c.engine.context_chunk_size; });
  flag<int32_t>(cmd, s, "--max-prompt-logprob-rows",
                "Logits rows a step may spend scoring prompts (echo with logprobs) (2048)",
                [](C& c) { return &c.engine.max_prompt_logprob_rows; });
  flag<int32_t>(cmd, s, "--kv-block-size", "Tokens per KV block (64)",
                [](C& c) { return &c.engine.kv_block_size; });
  flag<int64_t>(cmd, s, "--max-tokens-in-paged-kv-cache", "KV capacity in tokens (0: from memory)",
                [](C& c) { return &c.engine.max_tokens_in_paged_kv_cache; });
  flag<double>(cmd, s, "--kv-cache-free-gpu-mem-fraction", "GPU memory share for the KV cache (0.9)",
               [](C& c) { return &c.engine.kv_cache_free_gpu_mem_fraction; });
  flag<int64_t>(cmd, s, "--cpu-kv-cache-bytes", "CPU backend KV byte budget (1 GiB)",
                [](C& c) { return &c.engine.cpu_kv_cache_bytes; });
  flag<bool>(cmd, s, "--enable-prefix-caching", "Reuse KV blocks of shared prompt prefixes (true)",
             [](C& c) { return &c.engine.enable_prefix_caching; });
  flag<int32_t>(cmd, s, "--max-queue-length", "Waiting requests beyond this get 429 (1024)",
                [](C& c) { return &c.engine.max_queue_length; });
  flag<bool>(cmd, s, "--async-scheduling", "GPU: schedule the next step while the current one runs (true)",
             [](C& c) { return &c.engine.async_scheduling; });
  cmd->add_flag("--no-async-scheduling", a->no_async_scheduling, "Same as --async-scheduling false");
  cmd->callback([a]() { run_guarded([&]() { return run_serve(*a); }); });
}

}  // namespace dsinfer::cli
