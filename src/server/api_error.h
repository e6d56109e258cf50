// OpenAI-style API errors: an HTTP status plus {"error": {"message", "type", "param", "code"}}.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "server/http_types.h"

namespace dsinfer::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;
  std::string param;               // "" => null
  std::string code;                // "" => null
  double retry_after_seconds = 0;  // > 0: a Retry-After header (503 from the circuit breaker)
  ApiError(int status_, std::string message, std::string type_ = "invalid_request_error",
           std::string param_ = "", std::string code_ = "")
      : std::runtime_error(std::move(message)),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}
};

// 400 invalid_request_error naming the offending field.
inline ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

nlohmann::json error_json(const ApiError& error);
HttpResponse error_response(const ApiError& error);

}  // namespace dsinfer::server
