// Step error classification and the request error texts derived from it.
#include "resilience/step_error.h"

#include <algorithm>
#include <cctype>
#include <new>

namespace dsinfer {

namespace {
bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}
}  // namespace

StepErrorType classify_step_error(const std::exception& e) {
  if (const auto* fault = dynamic_cast<const StepFault*>(&e)) return fault->type();
  if (dynamic_cast<const std::bad_alloc*>(&e)) return StepErrorType::kOutOfMemory;
  std::string m = e.what();
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  if (contains(m, "out of memory")) return StepErrorType::kOutOfMemory;
  if (contains(m, "illegal address") || contains(m, "launch failure") || contains(m, "uncorrectable ecc") ||
      contains(m, "device lost") || contains(m, "sticky")) {
    return StepErrorType::kStickyCudaError;
  }
  return StepErrorType::kCudaError;
}

std::string step_error_message(StepErrorType type, const std::string& detail) {
  return std::string(to_string(type)) + ": " + detail;
}

int http_status_for_engine_error(const std::string& error) {
  auto starts = [&](StepErrorType t) { return error.rfind(std::string(to_string(t)) + ":", 0) == 0; };
  if (starts(StepErrorType::kTimeout)) return 504;
  if (starts(StepErrorType::kCudaError) || starts(StepErrorType::kOutOfMemory) ||
      starts(StepErrorType::kStickyCudaError)) {
    return 503;
  }
  return 500;
}

}  // namespace dsinfer
