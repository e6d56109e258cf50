// The server side of the resilience layer: the circuit breaker's gate on new generation requests (503 with
// Retry-After), the health answers that depend on it (/health/live fails after an unrecoverable device
// error, /health/ready is 503 while the breaker is open) and its metrics.
#pragma once
#include <functional>
#include <optional>

#include "dsinfer/engine.h"
#include "server/http_types.h"
#include "server/metrics.h"

namespace dsinfer::server {

// Throws ApiError 503 (code "circuit_open" or "engine_failed", with Retry-After) when the engine refuses
// new requests.
void check_admission(Engine& engine);
// 503 {"status":"failed"} once the engine reported a fatal error; nullopt otherwise.
std::optional<HttpResponse> liveness_failure(const Engine* engine);
// 503 {"status":"circuit_open"} while the breaker is open or the engine failed; nullopt otherwise.
std::optional<HttpResponse> readiness_failure(const Engine* engine);

// Registers dsinfer_circuit_breaker_state, dsinfer_fallback_level, dsinfer_step_errors_total{type} and the
// other resilience families, refreshed from `source` at every scrape.
void register_resilience_metrics(MetricsRegistry& registry, std::function<bool(EngineStats*)> source);

}  // namespace dsinfer::server
