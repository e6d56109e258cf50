// Step failures: the exception a fault (injected or classified) raises, the classification of real
// exceptions from the forward pass, and the error-message prefixes that let the server answer a failed
// request with the right HTTP status (503 for device errors, 504 for timeouts).
#pragma once
#include <exception>
#include <string>

#include "core/error.h"
#include "resilience/resilience_config.h"

namespace dsinfer {

class StepFault : public Error {
 public:
  StepFault(StepErrorType type, const std::string& message) : Error(message), type_(type) {}
  StepErrorType type() const { return type_; }

 private:
  StepErrorType type_;
};

// StepFault keeps its type; std::bad_alloc and "out of memory" messages are OUT_OF_MEMORY; CUDA messages
// naming a sticky error (illegal address, launch failure, ECC, device lost) are STICKY_CUDA_ERROR; the rest
// are recoverable CUDA_ERROR.
StepErrorType classify_step_error(const std::exception& e);

// "<TYPE>: <detail>", the error text of a request that failed because of a step error.
std::string step_error_message(StepErrorType type, const std::string& detail);
// The HTTP status for a failed request's engine error: 503 for CUDA_ERROR / OUT_OF_MEMORY /
// STICKY_CUDA_ERROR, 504 for TIMEOUT, 500 otherwise.
int http_status_for_engine_error(const std::string& error);

}  // namespace dsinfer
