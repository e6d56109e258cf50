// Serialisation of ApiError into the OpenAI error body and an HTTP response.
#include "server/api_error.h"

namespace dsinfer::server {

nlohmann::json error_json(const ApiError& error) {
  nlohmann::json e = {{"message", error.what()},
                      {"type", error.type},
                      {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
                      {"code", error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code)}};
  return {{"error", e}};
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse r;
  r.status = error.status;
  r.body = error_json(error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

const std::string& HttpRequest::header(const std::string& name) const {
  static const std::string empty;
  auto it = headers.find(name);
  return it == headers.end() ? empty : it->second;
}

}  // namespace dsinfer::server
