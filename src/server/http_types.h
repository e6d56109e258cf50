// Transport-neutral HTTP request/response types and the Responder interface through which handlers answer
// (a complete response or a chunked event stream). Only the Beast session implements Responder, so handlers
// never include Beast.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path + query as sent
  std::string path;                            // target without the query string
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // peer address, for logs

  // The header's value, or "" when absent (name in lower case).
  const std::string& header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, Allow, ...)
};

// How a handler answers one request. All calls happen on the server's I/O thread. Exactly one of send() or
// start_stream() ... end_stream() must be called; calls after the peer went away are ignored.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void send(HttpResponse response) = 0;
  // Sends the status line and headers of a chunked response (text/event-stream).
  virtual void start_stream(int status, const std::string& content_type) = 0;
  virtual void write_chunk(std::string data) = 0;
  virtual void end_stream() = 0;
  // Called once (on the I/O thread) when the peer disconnects or a write fails before the response ended.
  virtual void on_disconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
  // Extra key=value text for the request's log line (tokens, timings).
  virtual void annotate(const std::string& info) {}
};

using RequestHandler = std::function<void(const HttpRequest&, std::shared_ptr<Responder>)>;

}  // namespace dsinfer::server
