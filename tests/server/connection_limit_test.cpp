// The server's connection limit: the limit in effect (explicit, or from the descriptor limit), its config
// and CLI checks, the canned 503 answer, the bound on answers in flight, and end to end: connections past
// the limit get 503 too_many_connections and are closed, counted in the metrics, and once a connection
// closes a new one is served.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "expect_error.h"
#include "http_test_client.h"
#include "server/connection_reject.h"
#include "server/serve_config.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

TEST(ConnectionLimitTest, EffectiveLimitIsExplicitOrFromTheDescriptorLimit) {
  server::ServerOptions o;
  o.max_connections = 7;
  EXPECT_EQ(server::effective_max_connections(o, 1024), 7);
  o.max_connections = 0;
  EXPECT_EQ(server::effective_max_connections(o, 1024), 960);  // 64 kept for the engine
  EXPECT_EQ(server::effective_max_connections(o, 40), 16);     // at least 16
  EXPECT_EQ(server::effective_max_connections(o, int64_t{1} << 40), 65536);
}

TEST(ConnectionLimitTest, NegativeLimitIsAConfigError) {
  server::ServeConfig c;
  c.server.max_connections = -1;
  EXPECT_THROW(server::validate(c), Error);
  server::ServeConfig from_file;
  server::load_config_text("server:\n  max_connections: 12\n", "test.yaml", from_file);
  EXPECT_EQ(from_file.server.max_connections, 12);
}

TEST(ConnectionLimitTest, ClosingResponseCarriesLengthAndClose) {
  server::HttpResponse r;
  r.status = 503;
  r.body = R"({"error": {}})";
  r.headers.emplace_back("Retry-After", "2");
  const std::string text = server::serialize_closing_response(r);
  EXPECT_EQ(text.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << text;
  EXPECT_NE(text.find("\r\nContent-Type: application/json\r\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\nRetry-After: 2\r\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\nContent-Length: 13\r\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\nConnection: close\r\n\r\n" + r.body), std::string::npos) << text;
}

// The rejecter holds at most kMaxPending answers; sockets past that are closed at once. Its peers here
// read the answer (the first kMaxPending) or an immediate EOF (the rest).
TEST(ConnectionLimitTest, AnswersInFlightAreBounded) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  net::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const int port = acceptor.local_endpoint().port();
  const std::string answer =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  server::ConnectionRejecter rejecter(answer);
  constexpr int kExtra = 6;
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < server::ConnectionRejecter::kMaxPending + kExtra; ++i) {
    clients.push_back(std::make_unique<RawConnection>(port));
    rejecter.reject(acceptor.accept());
  }
  EXPECT_EQ(rejecter.pending(), server::ConnectionRejecter::kMaxPending);
  std::thread io([&] { ioc.run(); });
  int answered = 0, closed = 0;
  for (auto& c : clients) {
    std::string got;
    for (std::string part = c->recv_some(); !part.empty(); part = c->recv_some()) got += part;
    answered += got == answer;
    closed += got.empty();
  }
  io.join();  // every answer's drain ended (peer still open: after its one-second deadline)
  EXPECT_EQ(answered, server::ConnectionRejecter::kMaxPending);
  EXPECT_EQ(closed, kExtra);
  EXPECT_EQ(rejecter.pending(), 0);
}

double metric(ServerHarness& h, const std::string& name) {
  h.srv->registry().prometheus_text();  // runs the collectors (the open-connections gauge)
  return h.srv->registry().value(name);
}

TEST(ConnectionLimitTest, ConnectionsPastTheLimitGet503AndTheServerRecovers) {
  ServerHarness h([](server::ServeConfig& c) {
    c.server.max_connections = 3;
    c.server.retry_after_seconds = 2;
  });
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawConnection>(h.port));
  ASSERT_TRUE(wait_for([&] { return metric(h, "dsinfer_http_open_connections") == 3; }));

  // A fourth: answered unread, then closed by the server.
  RawConnection over(h.port);
  over.send_all(http_request_text("GET", "/health/live", ""));
  const HttpResult r = over.read_response();
  expect_error(r, 503, "", "too_many_connections");
  EXPECT_EQ(r.headers.at("retry-after"), "2");
  EXPECT_EQ(r.headers.at("connection"), "close");
  EXPECT_NE(r.body.find("limit is 3"), std::string::npos) << r.body;
  EXPECT_TRUE(over.closed_by_peer(std::chrono::milliseconds(5000)));
  EXPECT_EQ(metric(h, "dsinfer_http_connections_rejected_total"), 1);

  // The held connections are served as usual.
  held[0]->send_all(http_request_text("GET", "/health/live", ""));
  EXPECT_EQ(held[0]->read_response().status, 200);

  // One closes: a new connection is served.
  held[1]->close();
  ASSERT_TRUE(wait_for([&] { return metric(h, "dsinfer_http_open_connections") == 2; }));
  RawConnection next(h.port);
  next.send_all(http_request_text("GET", "/health/live", ""));
  EXPECT_EQ(next.read_response().status, 200);
  EXPECT_EQ(metric(h, "dsinfer_http_connections_rejected_total"), 1);
}

}  // namespace
}  // namespace dsinfer::testing
