// HttpSession at the edges of HTTP/1.x: a stream dropped for its unsent bytes while a write is in flight.
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

}  // namespace
}  // namespace dsinfer::testing
