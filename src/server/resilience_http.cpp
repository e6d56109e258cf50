// Resilience answers of the server: admission, health and metrics.
#include "server/resilience_http.h"

#include <nlohmann/json.hpp>

#include "resilience/circuit_breaker.h"
#include "server/api_error.h"

namespace dsinfer::server {

void check_admission(Engine& engine) {
  const EngineAdmission a = engine.admission();
  if (a.allowed) return;
  const bool failed = a.retry_after_seconds <= 0;
  ApiError e(503, a.reason, "service_unavailable", "", failed ? "engine_failed" : "circuit_open");
  e.retry_after_seconds = failed ? 10 : a.retry_after_seconds;
  throw e;
}

std::optional<HttpResponse> liveness_failure(const Engine* engine) {
  if (!engine) return std::nullopt;
  const std::string fatal = engine->fatal_error();
  if (fatal.empty()) return std::nullopt;
  HttpResponse r;
  r.status = 503;
  r.body = nlohmann::json{{"status", "failed"}, {"reason", fatal}}.dump();
  return r;
}

std::optional<HttpResponse> readiness_failure(const Engine* engine) {
  if (!engine) return std::nullopt;
  if (auto dead = liveness_failure(engine)) return dead;
  const EngineStats s = engine->stats();
  if (!s.breaker_enabled || s.breaker_state != static_cast<int32_t>(BreakerState::kOpen)) return std::nullopt;
  HttpResponse r;
  r.status = 503;
  r.body = nlohmann::json{{"status", "circuit_open"},
                          {"reason", "the circuit breaker is open after repeated step failures"}}
               .dump();
  return r;
}

namespace {
// Advances a monotonic counter to a cumulative engine count.
void catch_up(Counter& c, int64_t total) {
  if (static_cast<double>(total) > c.value()) c.inc(static_cast<double>(total) - c.value());
}
}  // namespace

void register_resilience_metrics(MetricsRegistry& registry, std::function<bool(EngineStats*)> source) {
  auto& state = registry.gauge("dsinfer_circuit_breaker_state",
                               "Circuit breaker state: 0 closed, 1 degraded, 2 open, 3 half-open");
  auto& level =
      registry.gauge("dsinfer_fallback_level", "Fallback strategies applied by the circuit breaker");
  auto& transitions =
      registry.counter("dsinfer_circuit_breaker_transitions_total", "Circuit breaker state or level changes");
  std::vector<Counter*> errors;
  for (StepErrorType t : kAllStepErrorTypes) {
    errors.push_back(&registry.counter("dsinfer_step_errors_total", "Failed engine steps by error class",
                                       {{"type", to_string(t)}}));
  }
  auto& timeouts =
      registry.counter("dsinfer_request_timeouts_total", "Requests failed by watchdog.request_timeout");
  auto& scale_out = registry.gauge("dsinfer_scale_out_recommended",
                                   "1 while a scale_out metrics rule holds (more replicas recommended)");
  auto& busy = registry.gauge("dsinfer_gpu_utilization_ratio",
                              "Busy share of the engine thread over the breaker's sliding window (0..1)");
  auto& reinits =
      registry.counter("dsinfer_cache_reinits_total", "Prefix-cache resets by reinit_cache rules");
  auto& batch =
      registry.gauge("dsinfer_batch_limit", "Current cap on sequences per step (0: max_batch_size)");
  registry.add_collector([=, &state, &level, &transitions, &timeouts, &scale_out, &busy, &reinits, &batch]() {
    EngineStats s;
    if (!source || !source(&s)) return;
    state.set(s.breaker_state);
    level.set(s.fallback_level);
    catch_up(transitions, s.breaker_transitions);
    for (size_t i = 0; i < errors.size(); ++i) catch_up(*errors[i], s.step_errors[i]);
    catch_up(timeouts, s.request_timeouts);
    scale_out.set(s.scale_out_recommended ? 1 : 0);
    busy.set(s.engine_busy_fraction);
    catch_up(reinits, s.cache_reinits);
    batch.set(s.batch_limit);
  });
}

}  // namespace dsinfer::server
