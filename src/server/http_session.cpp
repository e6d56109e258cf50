// HttpSession: request reading, response writing (whole or chunked), peer-disconnect detection, timeouts.
#include "server/http_session.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

#include "core/log.h"
#include "server/api_error.h"

namespace dsinfer::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string reason_phrase(int status) {
  return std::string(http::obsolete_reason(static_cast<http::status>(status)));
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, std::shared_ptr<const SessionConfig> config)
    : stream_(std::move(socket)), config_(std::move(config)) {
  beast::error_code ec;
  auto ep = stream_.socket().remote_endpoint(ec);
  if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  ++*config_->open_sessions;
}

HttpSession::~HttpSession() {
  if (!closed_) --*config_->open_sessions;
}

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()]() { self->do_read(); });
}

void HttpSession::do_read() {
  if (closed_) return;
  if (close_requested_ || (config_->draining && config_->draining())) {
    linger_close();
    return;
  }
  parser_.emplace();
  parser_->body_limit(config_->max_body_bytes);
  parser_->header_limit(64 * 1024);
  // The whole request must arrive within the idle timeout (slowloris), and an idle keep-alive connection
  // is closed after it.
  stream_.expires_after(config_->idle_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

// Clients such as curl send "Expect: 100-continue" with larger bodies and wait (curl: 1 s) for an interim
// answer before sending the body.
void HttpSession::on_header(beast::error_code ec) {
  if (ec || closed_) {
    on_read(ec);
    return;
  }
  auto read_body = [self = shared_from_this()]() {
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->on_read(ec); });
  };
  const auto expect = parser_->get()[http::field::expect];
  if (!beast::iequals(expect, "100-continue") || parser_->is_done()) {
    read_body();
    return;
  }
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  net::async_write(stream_, net::buffer(kContinue),
                   [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                     if (ec) {
                       self->close_now();
                       return;
                     }
                     read_body();
                   });
}

void HttpSession::on_read(beast::error_code ec) {
  stream_.expires_never();
  if (closed_) return;
  if (ec) {
    const bool got_some = parser_ && parser_->got_some();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      in_response_ = true;
      responded_ = false;
      send(error_response(ApiError(
          413, "request body exceeds the limit of " + std::to_string(config_->max_body_bytes) + " bytes",
          "invalid_request_error", "", "request_too_large")));
      return;
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      in_response_ = true;
      responded_ = false;
      send(error_response(ApiError(431, "request headers too large", "invalid_request_error")));
      return;
    }
    if (ec == beast::error::timeout) {
      if (got_some) log_debug("http: ", remote_, ": request not received within the idle timeout, closing");
      close_now();
      return;
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || !got_some) {
      close_now();
      return;
    }
    keep_alive_ = false;
    in_response_ = true;
    responded_ = false;
    send(error_response(ApiError(400, "malformed HTTP request: " + ec.message(), "invalid_request_error")));
    return;
  }

  http::request<http::string_body> req = parser_->release();
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = std::string(field.value());
  }
  r.body = std::move(req.body());
  r.remote = remote_;
  keep_alive_ = req.keep_alive();
  version_ = req.version();
  in_response_ = true;
  responded_ = false;
  streaming_ = false;
  stream_ended_ = false;
  on_disconnect_ = nullptr;
  ++generation_;
  watch_peer();
  config_->handler(r, shared_from_this());
}

// While a response is pending, wait for the socket to become readable: EOF (or an error) means the client
// went away. Data is a pipelined request: it is moved into the read buffer, where the next request's read
// starts, and the wait goes on (so a client that pipelines and then leaves is still noticed), up to
// kMaxPipelinedBytes; beyond that the watch stops and the rest stays in the socket.
void HttpSession::watch_peer() {
  const uint64_t gen = generation_;
  stream_.socket().async_wait(
      net::socket_base::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
        if (ec || self->closed_ || gen != self->generation_ || !self->in_response_) return;
        if (self->buffer_.size() >= kMaxPipelinedBytes) return;
        const auto space = self->buffer_.prepare(kMaxPipelinedBytes - self->buffer_.size());
        const ssize_t n =
            ::recv(self->stream_.socket().native_handle(), space.data(), space.size(), MSG_DONTWAIT);
        if (n > 0) {
          self->buffer_.commit(static_cast<size_t>(n));
          self->watch_peer();
          return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          self->watch_peer();
          return;
        }
        self->peer_gone();
      });
}

void HttpSession::peer_gone() {
  if (disconnected_) return;
  disconnected_ = true;
  auto callback = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  close_now();
  if (callback) callback();
}

void HttpSession::on_disconnect(std::function<void()> callback) {
  if (disconnected_) {
    if (callback) callback();
    return;
  }
  on_disconnect_ = std::move(callback);
}

void HttpSession::send(HttpResponse response) {
  if (closed_ || responded_ || !in_response_) return;
  responded_ = true;
  if (config_->draining && config_->draining()) keep_alive_ = false;
  auto res = std::make_shared<http::response<http::string_body>>();
  res->version(11);
  res->result(static_cast<unsigned>(response.status));
  res->set(http::field::server, "dsinfer");
  res->set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) res->set(name, value);
  res->keep_alive(keep_alive_);
  res->body() = std::move(response.body);
  res->prepare_payload();
  response_ = res;
  writing_ = true;
  stream_.expires_after(config_->idle_timeout);
  http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
    self->stream_.expires_never();
    self->writing_ = false;
    self->response_.reset();
    if (ec) {
      self->peer_gone();
      return;
    }
    self->finish_response();
  });
}

void HttpSession::start_stream(int status, const std::string& content_type) {
  if (closed_ || responded_ || !in_response_) return;
  responded_ = true;
  streaming_ = true;
  if (config_->draining && config_->draining()) keep_alive_ = false;
  // HTTP/1.0 has no chunked encoding: the body is the raw stream and ends with the connection.
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  head += "Server: dsinfer\r\nContent-Type: " + content_type + "\r\nCache-Control: no-cache\r\n";
  if (chunked_) head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  queue_write(std::move(head));
}

void HttpSession::write_chunk(std::string data) {
  if (closed_ || !streaming_ || stream_ended_ || data.empty()) return;
  if (!chunked_) {
    queue_write(std::move(data));
    return;
  }
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  queue_write(size + std::move(data) + "\r\n");
}

void HttpSession::end_stream() {
  if (closed_ || !streaming_ || stream_ended_) return;
  stream_ended_ = true;
  if (chunked_) {
    queue_write("0\r\n\r\n");
  } else if (!writing_) {
    do_write();  // nothing queued: finishes the response (and closes the connection)
  }
}

void HttpSession::queue_write(std::string data) {
  if (closed_) return;
  queued_bytes_ += data.size();
  if (queued_bytes_ > config_->max_pending_write_bytes) {
    log_warn("http: ", remote_, ": client is not reading (", queued_bytes_, " bytes pending), dropping it");
    // An async_write may still hold the front element: only what is not being written goes.
    if (writing_ && !queue_.empty()) {
      queue_.erase(queue_.begin() + 1, queue_.end());
      queued_bytes_ = queue_.front().size();
    } else {
      queue_.clear();
      queued_bytes_ = 0;
    }
    peer_gone();
    return;
  }
  queue_.push_back(std::move(data));
  if (!writing_) do_write();
}

void HttpSession::do_write() {
  if (closed_) return;
  if (queue_.empty()) {
    if (stream_ended_) finish_response();
    return;
  }
  writing_ = true;
  // A client that stops reading for the idle timeout is dropped (its request is cancelled).
  stream_.expires_after(config_->idle_timeout);
  net::async_write(stream_, net::buffer(queue_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->stream_.expires_never();
                     self->writing_ = false;
                     // Closed meanwhile (the write may have completed before the close): nothing more goes.
                     if (ec || self->closed_) {
                       self->queue_.clear();
                       self->queued_bytes_ = 0;
                       if (ec) self->peer_gone();
                       return;
                     }
                     self->queued_bytes_ -= self->queue_.front().size();
                     self->queue_.pop_front();
                     self->do_write();
                   });
}

void HttpSession::finish_response() {
  in_response_ = false;
  streaming_ = false;
  on_disconnect_ = nullptr;
  ++generation_;
  if (!keep_alive_ || close_requested_) {
    linger_close();
    return;
  }
  do_read();
}

void HttpSession::close_when_idle() {
  close_requested_ = true;
  if (!in_response_ && !closed_) close_now();
}

// Half-closes, then discards what the client still sends (up to a short deadline) so that an early error
// answer (413, 400) is not lost to a TCP reset.
void HttpSession::linger_close() {
  if (closed_) return;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) {
    close_now();
    return;
  }
  stream_.expires_after(std::chrono::seconds(2));
  linger_read();
}

void HttpSession::linger_read() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec || self->closed_) {
      self->close_now();
      return;
    }
    self->linger_read();
  });
}

void HttpSession::close_now() {
  if (closed_) return;
  closed_ = true;
  --*config_->open_sessions;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace dsinfer::server
