// Health: phase transitions and the health endpoints' bodies.
#include "server/health.h"

#include <nlohmann/json.hpp>

namespace dsinfer::server {

namespace {
const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kLoading:
      return "loading";
    case Phase::kWarmingUp:
      return "warming_up";
    case Phase::kReady:
      return "ready";
    case Phase::kDraining:
      return "draining";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}
}  // namespace

void Health::set(Phase phase, std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  reason_ = std::move(reason);
}

bool Health::set_unless_draining(Phase phase, std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ == Phase::kDraining) return false;
  phase_ = phase;
  reason_ = std::move(reason);
  return true;
}

Phase Health::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}

std::string Health::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

HttpResponse Health::live() {
  HttpResponse r;
  r.body = R"({"status":"alive"})";
  return r;
}

HttpResponse Health::readiness() const {
  std::lock_guard<std::mutex> lock(mu_);
  HttpResponse r;
  if (phase_ == Phase::kReady) {
    r.body = R"({"status":"ready"})";
    return r;
  }
  r.status = 503;
  r.body = nlohmann::json{{"status", phase_name(phase_)}, {"reason", reason_}}.dump();
  return r;
}

}  // namespace dsinfer::server
