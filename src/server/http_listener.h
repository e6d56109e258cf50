// The accepting socket: binds host:port, starts an HttpSession per connection and keeps weak references to
// them so that a drain can close idle connections and a stop can close all. Past the connection limit a new
// connection gets ConnectionRejecter's canned answer instead of a session.
#pragma once
#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/accept_backoff.h"
#include "server/connection_reject.h"
#include "server/http_session.h"

namespace dsinfer::server {

// At most max_connections open sessions (0: no limit); a connection accepted past it receives
// reject_response (serialize_closing_response) and on_rejected() is called.
struct ConnectionLimit {
  size_t max_connections = 0;
  std::string reject_response;
  std::function<void()> on_rejected;
};

class HttpListener : public std::enable_shared_from_this<HttpListener> {
 public:
  HttpListener(boost::asio::io_context& ioc, std::shared_ptr<const SessionConfig> config,
               ConnectionLimit limit = {});
  // Binds and listens; returns the bound port. Throws dsinfer::Error naming the address.
  int listen(const std::string& host, int port);
  void start_accepting();
  void stop_accepting();
  void close_idle_sessions();  // and the busy ones once their response is written
  void close_all_sessions();
  size_t open_sessions();

 private:
  void do_accept();
  // Logs (rate-limited) and accepts again, after a pause when the process is out of descriptors or memory.
  void accept_failed(const boost::system::error_code& ec);
  void prune();
  boost::asio::io_context& ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  AcceptBackoff backoff_;
  std::shared_ptr<const SessionConfig> config_;
  ConnectionLimit limit_;
  ConnectionRejecter rejecter_;
  std::vector<std::weak_ptr<HttpSession>> sessions_;
  bool accepting_ = false;
};

}  // namespace dsinfer::server
