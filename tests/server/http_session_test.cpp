// HttpSession at the edges of HTTP/1.x: a stream dropped for its unsent bytes while a write is in flight,
// streaming to an HTTP/1.0 client (no chunked encoding), and a client that pipelines a request and then goes
// away while the first one is generated.
#include "server/http_session.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "http_test_client.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;
using namespace std::chrono_literals;

// The stream's head is written at once, but its completion handler runs later; a chunk over the pending-write
// limit arrives in between. The queue used to be cleared under the in-flight write, whose handler then popped
// an empty deque (and the pending byte count wrapped around).
TEST(HttpSessionTest, DroppingASlowStreamKeepsTheBufferOfTheWriteInFlight) {
  net::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  RawConnection client(acceptor.local_endpoint().port());
  tcp::socket socket = acceptor.accept();
  auto config = std::make_shared<server::SessionConfig>();
  config->max_pending_write_bytes = 4096;
  bool disconnected = false;
  config->handler = [&](const server::HttpRequest&, std::shared_ptr<server::Responder> out) {
    out->on_disconnect([&]() { disconnected = true; });
    out->start_stream(200, "text/event-stream");
    out->write_chunk(std::string(8192, 'x'));
  };
  auto session = std::make_shared<server::HttpSession>(std::move(socket), config);
  session->start();
  client.send_all(http_request_text("GET", "/stream", ""));
  ioc.run_for(2s);
  EXPECT_TRUE(disconnected);
  EXPECT_FALSE(session->open());
  EXPECT_EQ(session->pending_write_bytes(), 0u);
  EXPECT_TRUE(client.closed_by_peer(1s));
}

// HTTP/1.0 has no chunked encoding: the stream is sent as is and the connection closes at its end.
TEST(HttpSessionTest, StreamingToAnHttp10ClientIsNotChunked) {
  ServerHarness h;
  const std::string body = R"({"prompt": "old client", "max_tokens": 6, "seed": 2, "stream": true})";
  const std::string chunked = post(h.port, "/v1/completions", body).body;
  RawConnection c(h.port);
  c.send_all("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body);
  const HttpResult r = c.read_response(10000ms);  // no length, not chunked: read to the end of the connection
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
  EXPECT_EQ(r.body.find("\r\n"), std::string::npos) << "chunk framing in the body";
  EXPECT_EQ(r.headers.at("connection"), "close");
  const std::vector<std::string> events = sse_payloads(r.body);
  ASSERT_FALSE(events.empty()) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> expected = sse_payloads(chunked);
  ASSERT_EQ(events.size(), expected.size()) << r.body;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json a = json::parse(events[i]), b = json::parse(expected[i]);
    EXPECT_EQ(a["choices"], b["choices"]) << r.body;
  }
  EXPECT_TRUE(c.closed_by_peer(1000ms));
}

// A request pipelined behind a long generation used to end the disconnect watch: the client could leave and
// the generation ran to its end. Pipelining itself still works.
TEST(HttpSessionTest, ClientThatPipelinesAndLeavesIsNoticed) {
  FakeEngine::Options opts;
  opts.token_delay = 10ms;
  ServerHarness h({}, opts);
  {
    RawConnection c(h.port);
    c.send_all(http_request_text("POST", "/v1/completions", R"({"prompt": "short", "max_tokens": 3})") +
               http_request_text("GET", "/health/live", ""));
    EXPECT_EQ(c.read_response().status, 200);
    EXPECT_EQ(c.read_response().body, R"({"status":"alive"})");
  }
  {
    RawConnection c(h.port);
    c.send_all(http_request_text("POST", "/v1/completions", R"({"prompt": "long", "max_tokens": 2000})") +
               http_request_text("GET", "/health/live", ""));
    EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 1; }));
    std::this_thread::sleep_for(50ms);
    c.close();
  }
  EXPECT_TRUE(wait_for([&]() { return h.engine->cancel_count() == 1; }, 2000ms));
  EXPECT_TRUE(wait_for([&]() { return h.engine->live() == 0; }));
}

}  // namespace
}  // namespace dsinfer::testing
