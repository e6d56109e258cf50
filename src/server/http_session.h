// One HTTP/1.1 connection (Boost.Beast): reads requests with a body limit and a read deadline (idle and
// slowloris connections are closed), hands each to the request handler as a Responder, writes complete or
// chunked (SSE) responses, and watches the socket while a response is pending so that a client that goes
// away is noticed at once (on_disconnect).
#pragma once
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "server/http_types.h"

namespace dsinfer::server {

struct SessionConfig {
  uint64_t max_body_bytes = 8 << 20;
  std::chrono::milliseconds idle_timeout{60000};
  RequestHandler handler;
  std::function<bool()> draining;  // true: answer with Connection: close and stop reading
  // A stream whose unsent bytes exceed this is dropped as a stalled reader (its request is cancelled).
  size_t max_pending_write_bytes = 16 << 20;
  // Sessions whose connection is open now (each adds one until it closes): the listener's connection limit
  // and the open-connections gauge.
  std::shared_ptr<std::atomic<int64_t>> open_sessions = std::make_shared<std::atomic<int64_t>>(0);
};

class HttpSession : public std::enable_shared_from_this<HttpSession>, public Responder {
 public:
  // Pipelined bytes read ahead while a response is pending (so that a disconnect behind them is noticed).
  static constexpr size_t kMaxPipelinedBytes = 64 * 1024;

  HttpSession(boost::asio::ip::tcp::socket socket, std::shared_ptr<const SessionConfig> config);
  ~HttpSession() override;
  void start();
  // Closes the connection now when no response is pending; otherwise after the pending response.
  void close_when_idle();
  // Closes the connection now.
  void close_now();
  bool open() const { return !closed_; }
  // Bytes of a stream queued and not yet written.
  size_t pending_write_bytes() const { return queued_bytes_; }

  void send(HttpResponse response) override;
  void start_stream(int status, const std::string& content_type) override;
  void write_chunk(std::string data) override;
  void end_stream() override;
  void on_disconnect(std::function<void()> callback) override;
  bool disconnected() const override { return disconnected_; }

 private:
  void do_read();
  void on_header(boost::beast::error_code ec);
  void on_read(boost::beast::error_code ec);
  void watch_peer();
  void peer_gone();
  void queue_write(std::string data);
  void do_write();
  void finish_response();
  void linger_close();
  void linger_read();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<const SessionConfig> config_;
  std::shared_ptr<boost::beast::http::response<boost::beast::http::string_body>> response_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  std::array<char, 4096> discard_{};
  std::function<void()> on_disconnect_;
  std::string remote_;
  uint64_t generation_ = 0;  // bumped per request: stale socket waits are ignored
  bool in_response_ = false;
  bool responded_ = false;
  bool streaming_ = false;
  bool stream_ended_ = false;
  bool writing_ = false;
  bool keep_alive_ = true;
  bool close_requested_ = false;
  bool disconnected_ = false;
  bool closed_ = false;
  bool chunked_ = true;    // the current stream's body is chunked (not for HTTP/1.0 requests)
  unsigned version_ = 11;  // of the current request: 10 or 11
};

}  // namespace dsinfer::server
