// Method + path routing: exact paths, 404 for unknown paths and 405 (with Allow) for a known path with
// another method.
#pragma once
#include <map>
#include <string>

#include "server/http_types.h"

namespace dsinfer::server {

class Router {
 public:
  void add(const std::string& method, const std::string& path, RequestHandler handler);
  // Runs the matching handler or answers 404/405 itself.
  void dispatch(const HttpRequest& request, const std::shared_ptr<Responder>& out) const;
  bool has_path(const std::string& path) const { return routes_.count(path) != 0; }

 private:
  std::map<std::string, std::map<std::string, RequestHandler>> routes_;  // path -> method -> handler
};

}  // namespace dsinfer::server
