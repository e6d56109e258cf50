// FaultInjector: the order of the checks is sticky error, scheduled failures, delay, random faults.
#include "resilience/fault_injector.h"

#include <thread>

#include "resilience/step_error.h"

namespace dsinfer {

FaultInjector::FaultInjector(const FaultInjectionConfig& config) : config_(config), rng_(config.seed) {}

void FaultInjector::before_step() {
  const int64_t n = ++steps_;
  if (config_.sticky_error_after_steps > 0 && n > config_.sticky_error_after_steps) {
    throw StepFault(StepErrorType::kStickyCudaError, str_cat("injected sticky device error at step ", n,
                                                             " (an illegal address: the context is lost)"));
  }
  if (config_.fail_after_steps > 0 && n > config_.fail_after_steps &&
      (config_.fail_steps == 0 || n <= config_.fail_after_steps + config_.fail_steps)) {
    throw StepFault(StepErrorType::kCudaError, str_cat("injected step failure at step ", n));
  }
  if (config_.step_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(config_.step_delay_ms));
  if (config_.step_error_rate > 0 && uniform_(rng_) < config_.step_error_rate) {
    throw StepFault(StepErrorType::kCudaError, str_cat("injected step error at step ", n));
  }
  if (config_.alloc_failure_rate > 0 && uniform_(rng_) < config_.alloc_failure_rate) {
    throw StepFault(StepErrorType::kOutOfMemory,
                    str_cat("injected allocation failure (out of memory) at step ", n));
  }
}

}  // namespace dsinfer
