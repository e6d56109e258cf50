// HttpListener: bind/listen/accept and the session list.
#include "server/http_listener.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace dsinfer::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpListener::HttpListener(net::io_context& ioc, std::shared_ptr<const SessionConfig> config,
                           ConnectionLimit limit)
    : ioc_(ioc),
      acceptor_(ioc),
      retry_timer_(ioc),
      config_(std::move(config)),
      limit_(std::move(limit)),
      rejecter_(limit_.reject_response) {}

int HttpListener::listen(const std::string& host, int port) {
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  net::ip::address address = net::ip::make_address(host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(port));
  } else {
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    DSI_CHECK(!ec && !results.empty(), "cannot resolve host \"", host, "\": ", ec.message());
    endpoint = results.begin()->endpoint();
  }
  acceptor_.open(endpoint.protocol(), ec);
  DSI_CHECK(!ec, "cannot open a socket for ", host, ":", port, ": ", ec.message());
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  acceptor_.bind(endpoint, ec);
  DSI_CHECK(!ec, "cannot bind ", host, ":", port, ": ", ec.message());
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  DSI_CHECK(!ec, "cannot listen on ", host, ":", port, ": ", ec.message());
  return acceptor_.local_endpoint().port();
}

void HttpListener::start_accepting() {
  accepting_ = true;
  do_accept();
}

void HttpListener::do_accept() {
  acceptor_.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
    if (!self->accepting_ || ec == net::error::operation_aborted) return;
    if (ec) {
      self->accept_failed(ec);
      return;
    }
    boost::system::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    self->prune();
    if (self->limit_.max_connections > 0 &&
        self->config_->open_sessions->load() >= static_cast<int64_t>(self->limit_.max_connections)) {
      self->rejecter_.reject(std::move(socket));
      if (self->limit_.on_rejected) self->limit_.on_rejected();
      self->do_accept();
      return;
    }
    auto session = std::make_shared<HttpSession>(std::move(socket), self->config_);
    self->sessions_.push_back(session);
    session->start();
    self->do_accept();
  });
}

void HttpListener::accept_failed(const boost::system::error_code& ec) {
  const AcceptBackoff::Retry retry = backoff_.on_error(ec, AcceptBackoff::Clock::now());
  if (retry.log) {
    log_warn("http: accept failed: ", ec.message(),
             retry.failures > 1 ? str_cat(" (", retry.failures, " failures since the last report)") : "",
             retry.delay.count() > 0 ? str_cat("; accepting again in ", retry.delay.count(), " ms") : "");
  }
  if (retry.delay.count() == 0) {
    do_accept();
    return;
  }
  retry_timer_.expires_after(retry.delay);
  retry_timer_.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
    if (!wait_ec && self->accepting_) self->do_accept();
  });
}

void HttpListener::stop_accepting() {
  accepting_ = false;
  retry_timer_.cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void HttpListener::prune() {
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [](const std::weak_ptr<HttpSession>& w) {
                                   auto s = w.lock();
                                   return !s || !s->open();
                                 }),
                  sessions_.end());
}

void HttpListener::close_idle_sessions() {
  prune();
  for (auto& w : sessions_) {
    if (auto s = w.lock()) s->close_when_idle();
  }
}

void HttpListener::close_all_sessions() {
  for (auto& w : sessions_) {
    if (auto s = w.lock()) s->close_now();
  }
  sessions_.clear();
}

size_t HttpListener::open_sessions() {
  prune();
  return sessions_.size();
}

}  // namespace dsinfer::server
