// YAML loading of ServeConfig: a table of sections, each a table of typed keys. Unknown sections and keys
// are errors naming them.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "resilience/resilience_yaml.h"
#include "server/serve_config.h"

namespace dsinfer::server {

namespace {

using KeyReader = std::function<void(const YAML::Node&, const std::string& where, ServeConfig&)>;
using Section = std::map<std::string, KeyReader>;

template <typename T>
T scalar(const YAML::Node& node, const std::string& where) {
  DSI_CHECK(node.IsScalar(), where, " must be a scalar");
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    if constexpr (std::is_same_v<T, bool>) fail(where, " must be true or false, got \"", node.Scalar(), "\"");
    if constexpr (std::is_integral_v<T>) fail(where, " must be an integer, got \"", node.Scalar(), "\"");
    if constexpr (std::is_floating_point_v<T>) fail(where, " must be a number, got \"", node.Scalar(), "\"");
    fail(where, " has an invalid value \"", node.Scalar(), "\"");
  }
}

// A key reader storing into the member that `field` returns.
template <typename T, typename F>
KeyReader key(F field) {
  return [field](const YAML::Node& node, const std::string& where, ServeConfig& c) {
    *field(c) = scalar<T>(node, where);
  };
}

#define DSI_SERVER_KEY(T, member)                                      \
  {                                                                    \
#member, key < T>([](ServeConfig& c) { return &c.server.member; }) \
  }
#define DSI_ENGINE_KEY(T, member)                                      \
  {                                                                    \
#member, key < T>([](ServeConfig& c) { return &c.engine.member; }) \
  }

std::map<std::string, Section> base_sections() {
  return {
      {"server",
       {
           DSI_SERVER_KEY(std::string, host),
           DSI_SERVER_KEY(int, port),
           DSI_SERVER_KEY(std::string, served_model_name),
           DSI_SERVER_KEY(std::string, api_key),
           DSI_SERVER_KEY(int64_t, max_body_bytes),
           DSI_SERVER_KEY(int64_t, max_connections),
           DSI_SERVER_KEY(double, request_timeout_seconds),
           DSI_SERVER_KEY(double, idle_timeout_seconds),
           DSI_SERVER_KEY(double, drain_timeout_seconds),
           DSI_SERVER_KEY(double, retry_after_seconds),
           DSI_SERVER_KEY(std::string, log_level),
           DSI_SERVER_KEY(std::string, request_log_level),
           DSI_SERVER_KEY(std::string, reasoning_parser),
       }},
      {"engine",
       {
           DSI_ENGINE_KEY(std::string, device),
           DSI_ENGINE_KEY(std::string, cuda_arch),
           DSI_ENGINE_KEY(bool, dummy_weights),
           DSI_ENGINE_KEY(int32_t, max_batch_size),
           DSI_ENGINE_KEY(int32_t, max_num_tokens),
           DSI_ENGINE_KEY(bool, enable_chunked_context),
           DSI_ENGINE_KEY(int32_t, context_chunk_size),
           DSI_ENGINE_KEY(int32_t, max_prompt_logprob_rows),
           DSI_ENGINE_KEY(int32_t, kv_block_size),
           DSI_ENGINE_KEY(int64_t, max_tokens_in_paged_kv_cache),
           DSI_ENGINE_KEY(double, kv_cache_free_gpu_mem_fraction),
           DSI_ENGINE_KEY(int64_t, cpu_kv_cache_bytes),
           DSI_ENGINE_KEY(bool, enable_prefix_caching),
           DSI_ENGINE_KEY(int32_t, max_queue_length),
           DSI_ENGINE_KEY(bool, async_scheduling),
           DSI_ENGINE_KEY(bool, cuda_graphs),
           DSI_ENGINE_KEY(int32_t, cuda_graph_max_batch_size),
           DSI_ENGINE_KEY(int32_t, cuda_graph_precapture_context),
       }},
  };
}

// The server and engine sections plus the resilience sections (circuit_breaker, watchdog, length_tiers,
// fault_injection), whose readers store into EngineConfig::resilience.
const std::map<std::string, Section>& sections() {
  static const std::map<std::string, Section> table = [] {
    std::map<std::string, Section> t = base_sections();
    for (const auto& [name, keys] : resilience_sections()) {
      Section& section = t[name];
      for (const auto& [k, read] : keys) {
        section[k] = [read](const YAML::Node& node, const std::string& where, ServeConfig& c) {
          read(node, where, c.engine.resilience);
        };
      }
    }
    return t;
  }();
  return table;
}

#undef DSI_SERVER_KEY
#undef DSI_ENGINE_KEY

std::string known_keys(const std::map<std::string, Section>& table) {
  std::string out;
  for (const auto& [name, unused] : table) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string known_keys(const Section& section) {
  std::string out;
  for (const auto& [name, unused] : section) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void load_config_text(const std::string& text, const std::string& origin, ServeConfig& config) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(origin, ": invalid YAML: ", e.what());
  }
  if (root.IsNull()) return;  // an empty file changes nothing
  DSI_CHECK(root.IsMap(), origin, ": the top level must be a mapping of sections (", known_keys(sections()),
            ")");
  for (const auto& entry : root) {
    const std::string name = entry.first.as<std::string>();
    auto section = sections().find(name);
    DSI_CHECK(section != sections().end(), origin, ": unknown section \"", name,
              "\" (known: ", known_keys(sections()), ")");
    if (entry.second.IsNull()) continue;
    DSI_CHECK(entry.second.IsMap(), origin, ": section \"", name, "\" must be a mapping");
    for (const auto& kv : entry.second) {
      const std::string k = kv.first.as<std::string>();
      auto reader = section->second.find(k);
      DSI_CHECK(reader != section->second.end(), origin, ": unknown key \"", name, ".", k, "\" (known in ",
                name, ": ", known_keys(section->second), ")");
      reader->second(kv.second, origin + ": " + name + "." + k, config);
    }
  }
}

void load_config_file(const std::string& path, ServeConfig& config) {
  std::ifstream in(path, std::ios::binary);
  DSI_CHECK(in, "cannot read config file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  load_config_text(text.str(), path, config);
}

std::string retry_after(const ServerOptions& options) {
  return std::to_string(static_cast<int64_t>(std::ceil(options.retry_after_seconds)));
}

int64_t effective_max_connections(const ServerOptions& options, int64_t fd_limit) {
  if (options.max_connections > 0) return options.max_connections;
  constexpr int64_t kReserved = 64, kMin = 16, kMax = 65536;
  return std::clamp<int64_t>(fd_limit - kReserved, kMin, kMax);
}

void validate(const ServeConfig& c) {
  const ServerOptions& s = c.server;
  DSI_CHECK(s.port >= 0 && s.port <= 65535, "server.port must be in [0, 65535], got ", s.port);
  DSI_CHECK(!s.host.empty(), "server.host must not be empty");
  DSI_CHECK(s.max_body_bytes > 0, "server.max_body_bytes must be > 0, got ", s.max_body_bytes);
  DSI_CHECK(s.max_connections >= 0,
            "server.max_connections must be >= 0 (0: from the descriptor limit), got ", s.max_connections);
  DSI_CHECK(s.request_timeout_seconds >= 0, "server.request_timeout_seconds must be >= 0 (0: no limit)");
  DSI_CHECK(s.idle_timeout_seconds > 0, "server.idle_timeout_seconds must be > 0");
  DSI_CHECK(s.drain_timeout_seconds >= 0, "server.drain_timeout_seconds must be >= 0");
  DSI_CHECK(s.retry_after_seconds >= 0, "server.retry_after_seconds must be >= 0");
  if (!s.log_level.empty()) parse_log_level(s.log_level);
  parse_log_level(s.request_log_level);
  DSI_CHECK(
      s.reasoning_parser == "auto" || s.reasoning_parser == "deepseek_r1" || s.reasoning_parser == "none",
      "server.reasoning_parser must be auto, deepseek_r1 or none, got \"", s.reasoning_parser, "\"");
  const EngineConfig& e = c.engine;
  DSI_CHECK(e.device == "auto" || e.device == "cpu" || e.device == "cuda",
            "engine.device must be auto, cpu or cuda, got \"", e.device, "\"");
  DSI_CHECK(e.cuda_arch == "auto" || e.cuda_arch == "sm_90" || e.cuda_arch == "sm_80",
            "engine.cuda_arch must be auto, sm_90 or sm_80, got \"", e.cuda_arch, "\"");
  DSI_CHECK(e.max_batch_size >= 1, "engine.max_batch_size must be >= 1, got ", e.max_batch_size);
  DSI_CHECK(e.max_num_tokens >= 1, "engine.max_num_tokens must be >= 1, got ", e.max_num_tokens);
  DSI_CHECK(e.context_chunk_size >= 1, "engine.context_chunk_size must be >= 1, got ", e.context_chunk_size);
  DSI_CHECK(e.max_prompt_logprob_rows >= 1, "engine.max_prompt_logprob_rows must be >= 1, got ",
            e.max_prompt_logprob_rows);
  DSI_CHECK(e.kv_block_size >= 1, "engine.kv_block_size must be >= 1, got ", e.kv_block_size);
  DSI_CHECK(e.max_tokens_in_paged_kv_cache >= 0, "engine.max_tokens_in_paged_kv_cache must be >= 0");
  DSI_CHECK(e.kv_cache_free_gpu_mem_fraction > 0 && e.kv_cache_free_gpu_mem_fraction <= 1,
            "engine.kv_cache_free_gpu_mem_fraction must be in (0, 1], got ",
            e.kv_cache_free_gpu_mem_fraction);
  DSI_CHECK(e.cpu_kv_cache_bytes > 0, "engine.cpu_kv_cache_bytes must be > 0");
  DSI_CHECK(e.max_queue_length >= 1, "engine.max_queue_length must be >= 1, got ", e.max_queue_length);
  DSI_CHECK(e.cuda_graph_max_batch_size >= 0,
            "engine.cuda_graph_max_batch_size must be >= 0 (0: max_batch_size), got ",
            e.cuda_graph_max_batch_size);
  DSI_CHECK(e.cuda_graph_precapture_context >= 0,
            "engine.cuda_graph_precapture_context must be >= 0 (0: graphs recorded at first use), got ",
            e.cuda_graph_precapture_context);
  ::dsinfer::validate(e.resilience);
}

}  // namespace dsinfer::server
