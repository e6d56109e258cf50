// Liveness/readiness state of the server and the /health/live and /health/ready answers.
#pragma once
#include <mutex>
#include <string>

#include "server/http_types.h"

namespace dsinfer::server {

enum class Phase { kLoading, kWarmingUp, kReady, kDraining, kFailed };

class Health {
 public:
  void set(Phase phase, std::string reason = "");
  // As set(), unless the server is draining (checked and set under one lock: a drain that begins meanwhile
  // is never overwritten by "ready"). Returns whether the phase was set.
  bool set_unless_draining(Phase phase, std::string reason = "");
  Phase phase() const;
  std::string reason() const;
  bool ready() const { return phase() == Phase::kReady; }

  // 200 {"status": "alive"} while the process serves HTTP.
  static HttpResponse live();
  // 200 {"status": "ready"} or 503 {"status": <phase>, "reason": ...}.
  HttpResponse readiness() const;

 private:
  mutable std::mutex mu_;
  Phase phase_ = Phase::kLoading;
  std::string reason_ = "loading the model";
};

}  // namespace dsinfer::server
