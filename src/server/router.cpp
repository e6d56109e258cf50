// Router: exact-match dispatch with OpenAI-style 404/405 error bodies.
#include "server/router.h"

#include "server/api_error.h"

namespace dsinfer::server {

void Router::add(const std::string& method, const std::string& path, RequestHandler handler) {
  routes_[path][method] = std::move(handler);
}

void Router::dispatch(const HttpRequest& request, const std::shared_ptr<Responder>& out) const {
  auto path = routes_.find(request.path);
  if (path == routes_.end()) {
    out->send(error_response(ApiError(404, "Invalid URL (" + request.method + " " + request.path + ")",
                                      "invalid_request_error", "", "not_found")));
    return;
  }
  auto handler = path->second.find(request.method);
  if (handler == path->second.end()) {
    std::string allow;
    for (const auto& [method, unused] : path->second) allow += (allow.empty() ? "" : ", ") + method;
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
