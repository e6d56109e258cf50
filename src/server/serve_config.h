// Configuration of `dsinfer serve`: server options plus the EngineConfig, loadable from a YAML file whose
// top-level keys are sections (server:, engine:). Sections are registered by name, so a new section (e.g.
// circuit_breaker:) is one more entry in config_file.cpp's table.
#pragma once
#include <cstdint>
#include <string>

#include "dsinfer/engine.h"

namespace dsinfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: an ephemeral port (tests)
  std::string served_model_name;     // "" => the model directory's base name
  std::string api_key;               // "" => no authentication
  int64_t max_body_bytes = 8 << 20;  // larger request bodies get 413
  // Open connections at most; one more gets 503 too_many_connections and is closed (0: automatic, from the
  // process's descriptor limit: effective_max_connections).
  int64_t max_connections = 0;
  double request_timeout_seconds = 600;    // a generation request running longer is cancelled (0: no limit)
  double idle_timeout_seconds = 60;        // a connection idle (or sending a request) this long is closed
  double drain_timeout_seconds = 30;       // on SIGTERM: how long in-flight requests may take to finish
  double retry_after_seconds = 1;          // Retry-After of 429 answers
  std::string log_level = "";              // "" => keep the process's level
  std::string request_log_level = "info";  // level of the one-line-per-request log
  // Chat answers' thinking (<think>...</think>) as reasoning_content: "auto" (when the tokenizer has those
  // tokens), "deepseek_r1" (always) or "none".
  std::string reasoning_parser = "auto";
};

// The engine's defaults under `dsinfer serve`: EngineConfig's, except that the decode steps' CUDA graphs
// for contexts up to 4096 tokens are recorded at startup, so that no running stream stalls for a capture
// (~34 ms each) when the batch or the longest context first reaches a bucket. V2-Lite on an H100: the 68
// graphs up to 2048 tokens added 0.4 s to its load (docs/benchmarks.md, sixtieth session).
inline EngineConfig serve_engine_defaults() {
  EngineConfig e;
  e.cuda_graph_precapture_context = 4096;
  return e;
}

struct ServeConfig {
  ServerOptions server;
  EngineConfig engine = serve_engine_defaults();
};

// Reads `path` into `config` (keys not in the file keep their values). Throws dsinfer::Error naming the file
// and the offending key for unknown sections/keys, wrong types and unreadable files.
void load_config_file(const std::string& path, ServeConfig& config);
// The same from YAML text (`origin` names it in errors).
void load_config_text(const std::string& text, const std::string& origin, ServeConfig& config);

// The Retry-After header value of 429 answers: retry_after_seconds rounded up to whole seconds.
std::string retry_after(const ServerOptions& options);

// The connection limit in effect: max_connections when > 0, else the soft descriptor limit `fd_limit` less
// 64 descriptors kept for the engine (model files, logs), at least 16 and at most 65536.
int64_t effective_max_connections(const ServerOptions& options, int64_t fd_limit);

// Checks ranges (port, timeouts, sizes, device, log levels); throws dsinfer::Error naming the field.
void validate(const ServeConfig& config);

}  // namespace dsinfer::server
