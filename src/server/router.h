// Method + path routing: exact paths, then path prefixes (the longest first; e.g. /v1/models/{model}), 404
// for unknown paths and 405 (with Allow) for a known path with another method.
#pragma once
#include <map>
#include <string>

#include "server/http_types.h"

namespace dsinfer::server {

class Router {
 public:
  void add(const std::string& method, const std::string& path, RequestHandler handler);
  // Every path that starts with `prefix` (and is not an exact route); the handler reads the rest itself.
  void add_prefix(const std::string& method, const std::string& prefix, RequestHandler handler);
  // Runs the matching handler or answers 404/405 itself.
  void dispatch(const HttpRequest& request, const std::shared_ptr<Responder>& out) const;
  bool has_path(const std::string& path) const { return routes_.count(path) != 0; }

 private:
  using Methods = std::map<std::string, RequestHandler>;
  const Methods* find(const std::string& path) const;
  std::map<std::string, Methods> routes_;    // path -> method -> handler
  std::map<std::string, Methods> prefixes_;  // path prefix -> method -> handler
};

}  // namespace dsinfer::server
