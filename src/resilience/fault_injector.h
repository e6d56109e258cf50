// FaultInjector: test-only faults in the engine's steps (`fault_injection:` section, enabled only with
// `dsinfer serve --enable-fault-injection`): random recoverable step errors and allocation failures, a delay
// per step, a run of failing steps after N steps, and a sticky device error after N steps. Seeded, so a run
// is reproducible for a given sequence of steps. Engine thread only.
#pragma once
#include <cstdint>
#include <random>

#include "resilience/resilience_config.h"

namespace dsinfer {

class FaultInjector {
 public:
  explicit FaultInjector(const FaultInjectionConfig& config);
  // Called before every step's forward pass: sleeps step_delay_ms, may throw StepFault.
  void before_step();
  int64_t steps() const { return steps_; }

 private:
  FaultInjectionConfig config_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  int64_t steps_ = 0;
};

}  // namespace dsinfer
