// Router: exact-match, then longest-prefix dispatch with OpenAI-style 404/405 error bodies.
#include "server/router.h"

#include "server/api_error.h"

namespace dsinfer::server {

void Router::add(const std::string& method, const std::string& path, RequestHandler handler) {
  routes_[path][method] = std::move(handler);
}

void Router::add_prefix(const std::string& method, const std::string& prefix, RequestHandler handler) {
  prefixes_[prefix][method] = std::move(handler);
}

const Router::Methods* Router::find(const std::string& path) const {
  if (auto it = routes_.find(path); it != routes_.end()) return &it->second;
  const Methods* best = nullptr;
  size_t best_length = 0;
  for (const auto& [prefix, methods] : prefixes_) {
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
        prefix.size() > best_length) {
      best = &methods;
      best_length = prefix.size();
    }
  }
  return best;
}

void Router::dispatch(const HttpRequest& request, const std::shared_ptr<Responder>& out) const {
  const Methods* methods = find(request.path);
  if (methods == nullptr) {
    out->send(error_response(ApiError(404, "Invalid URL (" + request.method + " " + request.path + ")",
                                      "invalid_request_error", "", "not_found")));
    return;
  }
  auto handler = methods->find(request.method);
  if (handler == methods->end()) {
    std::string allow;
    for (const auto& [method, unused] : *methods) allow += (allow.empty() ? "" : ", ") + method;
    HttpResponse r = error_response(ApiError(
        405, "Method " + request.method + " not allowed for " + request.path + " (allowed: " + allow + ")",
        "invalid_request_error", "", "method_not_allowed"));
    r.headers.emplace_back("Allow", allow);
    out->send(std::move(r));
    return;
  }
  handler->second(request, out);
}

}  // namespace dsinfer::server
