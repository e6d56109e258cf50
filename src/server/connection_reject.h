// Connections over the server's limit: answered with one canned HTTP response (503 too_many_connections,
// Connection: close) without reading the request, then closed gracefully (send side shut, the peer's bytes
// drained for at most a second so that the answer is not lost to a reset). At most kMaxPending such answers
// are in flight; past that a connection is closed at once, so a flood cannot hold more descriptors than the
// limit plus kMaxPending.
#pragma once
#include <boost/asio.hpp>
#include <memory>
#include <string>

#include "server/http_types.h"

namespace dsinfer::server {

// The raw HTTP/1.1 text of `response` with Connection: close and a Content-Length.
std::string serialize_closing_response(const HttpResponse& response);

class ConnectionRejecter {
 public:
  static constexpr int kMaxPending = 64;

  // `response`: the bytes every rejected connection receives (serialize_closing_response).
  explicit ConnectionRejecter(std::string response);
  // Answers and closes `socket` (or closes it at once when kMaxPending answers are in flight).
  void reject(boost::asio::ip::tcp::socket socket);
  // Answers in flight now.
  int pending() const { return *pending_; }

 private:
  std::shared_ptr<const std::string> response_;
  std::shared_ptr<int> pending_;  // shared with the answers in flight (all on the I/O thread)
};

}  // namespace dsinfer::server
