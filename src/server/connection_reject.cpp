// ConnectionRejecter: the canned answer, its write, the graceful close and the bound on answers in flight.
#include "server/connection_reject.h"

#include <array>
#include <chrono>

#include "core/log.h"

namespace dsinfer::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// One rejected connection: write the answer, shut the send side, read until the peer closes or a second
// passes, close.
class Rejected : public std::enable_shared_from_this<Rejected> {
 public:
  Rejected(tcp::socket socket, std::shared_ptr<const std::string> response, std::shared_ptr<int> pending)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        response_(std::move(response)),
        pending_(std::move(pending)) {
    ++*pending_;
  }
  ~Rejected() { --*pending_; }

  void start() {
    timer_.expires_after(std::chrono::seconds(1));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->close();
    });
    net::async_write(socket_, net::buffer(*response_),
                     [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       if (ec) {
                         self->close();
                         return;
                       }
                       boost::system::error_code ignored;
                       self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
                       self->drain();
                     });
  }

 private:
  void drain() {
    socket_.async_read_some(net::buffer(discard_),
                            [self = shared_from_this()](boost::system::error_code ec, size_t) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->drain();
                            });
  }
  void close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  std::shared_ptr<const std::string> response_;
  std::shared_ptr<int> pending_;
  std::array<char, 4096> discard_{};
};

}  // namespace

std::string serialize_closing_response(const HttpResponse& response) {
  std::string out =
      "HTTP/1.1 " + std::to_string(response.status) + " " + reason_phrase(response.status) + "\r\n";
  out += "Content-Type: " + response.content_type + "\r\n";
  for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += response.body;
  return out;
}

ConnectionRejecter::ConnectionRejecter(std::string response)
    : response_(std::make_shared<const std::string>(std::move(response))),
      pending_(std::make_shared<int>(0)) {}

void ConnectionRejecter::reject(tcp::socket socket) {
  if (*pending_ >= kMaxPending) {
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  std::make_shared<Rejected>(std::move(socket), response_, pending_)->start();
}

}  // namespace dsinfer::server
