// Random bad requests against the whole server (HTTP parsing, request validation, the engine seam, answers),
// served by the FakeEngine: valid chat, completions, /tokenize and /detokenize bodies that use most fields,
// mutated at random (values of every JSON type and extreme numbers put anywhere, keys dropped or added,
// arrays grown, the text cut or spoiled, the body sent to another endpoint). Every answer must be a 200 that
// parses (a whole answer with choices, or a stream that ends with [DONE]) or a 4xx OpenAI error object; never
// a 5xx, a hang or a crash; and afterwards the server is ready and the engine holds no request.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "http_test_client.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;

const char* const kSeeds[] = {
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a function."}],
        "max_tokens": 6, "temperature": 0.7, "top_p": 0.9, "n": 2, "stop": ["\n\n"], "seed": 3, "logprobs": true,
        "top_logprobs": 2, "presence_penalty": 0.1, "frequency_penalty": 0.1, "logit_bias": {"5": 10},
        "stream": false, "stream_options": {"include_usage": true}, "user": "u"})",
    R"({"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather",
        "arguments": "{\"city\": \"Oslo\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1,
        "maximum": 7}}, "required": ["city"]}}}], "tool_choice": "auto", "max_tokens": 6, "stream": true})",
    R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "JSON please"}]}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema":
        {"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": 0}, "b": {"type": "array",
        "prefixItems": [{"type": "integer", "multipleOf": 3}, {"enum": ["p", "q"]}]}}, "required": ["a"]}}},
        "max_completion_tokens": 10})",
    R"({"prompt": "def f(", "max_tokens": 6, "echo": true, "logprobs": 2, "n": 2, "best_of": 3,
        "temperature": 0, "stop": "\n"})",
    R"({"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 4, "stream": true, "seed": 9,
        "response_format": {"type": "json_object"}})",
    R"({"messages": [{"role": "user", "content": "count me"}], "add_generation_prompt": true,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})",
    R"({"tokens": [1, 2, 300, 4000]})",
};
// Which endpoint each seed is for.
const char* const kSeedPaths[] = {"/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions",
                                  "/v1/completions",      "/v1/completions",      "/tokenize",
                                  "/detokenize"};
const char* const kPaths[] = {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"};

json random_value(std::mt19937& rng) {
  switch (rng() % 17) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return 0;
    case 3:
      return -1;
    case 4:
      return 2147483648LL;
    case 5:
      return INT64_MIN;
    case 6:
      return 1e300;
    case 7:
      return -0.5;
    case 8:
      return "";
    case 9:
      return std::string(5000, 'a');
    case 10:
      return "\xc3\xa9\xf0\x9f\x98\x80 <｜end▁of▁sentence｜> \\u0000";
    case 11:
      return json::array({1, "a", nullptr});
    case 12:
      return json::object({{"k", "v"}});
    case 13: {
      json deep = 1;
      for (int i = 0; i < 60; ++i) deep = json::array({deep});
      return deep;
    }
    case 14:
      return rng() % 2 ? json(static_cast<int>(rng() % 300)) : json(std::to_string(rng() % 300));
    case 15:
      return rng() % 2 ? json(1e-7) : json(-1.5e10);
    default:
      return json::array();
  }
}

// Every value in the document, as a pointer to it (the root included).
void collect(json& j, std::vector<json*>& out) {
  out.push_back(&j);
  if (j.is_object() || j.is_array())
    for (auto& child : j) collect(child, out);
}

void mutate(json& body, std::mt19937& rng) {
  std::vector<json*> nodes;
  collect(body, nodes);
  json& at = *nodes[rng() % nodes.size()];
  switch (rng() % 5) {
    case 0:
    case 1:
      if (&at != &body) at = random_value(rng);
      break;
    case 2:
      if (at.is_object() && !at.empty()) {
        auto it = at.begin();
        std::advance(it, static_cast<long>(rng() % at.size()));
        at.erase(it);
      }
      break;
    case 3:
      if (at.is_object()) at["zz" + std::to_string(rng() % 3)] = random_value(rng);
      break;
    default:
      if (at.is_array() && !at.empty()) {
        const json first = at[0];
        for (uint32_t i = 0, n = 1 + rng() % 100; i < n; ++i) at.push_back(first);
      }
      break;
  }
}

// A 200 that parses or a 4xx OpenAI error; never anything else.
void check_answer(const HttpResult& r, const std::string& path, const std::string& body) {
  const std::string where =
      "\nrequest to " + path + ": " + body.substr(0, 600) + "\nanswer: " + r.body.substr(0, 600);
  ASSERT_TRUE(r.status == 200 || (r.status >= 400 && r.status < 500)) << r.status << where;
  if (r.status != 200) {
    ASSERT_TRUE(json::accept(r.body)) << where;
    const json e = json::parse(r.body);
    ASSERT_TRUE(e.contains("error")) << where;
    EXPECT_TRUE(e["error"]["message"].is_string() && !e["error"]["message"].get<std::string>().empty())
        << where;
    EXPECT_TRUE(e["error"]["type"].is_string()) << where;
    return;
  }
  auto it = r.headers.find("content-type");
  const bool streamed = it != r.headers.end() && it->second.find("text/event-stream") != std::string::npos;
  if (!streamed) {
    ASSERT_TRUE(json::accept(r.body)) << where;
    const json answer = json::parse(r.body);
    if (path == "/tokenize")
      EXPECT_TRUE(answer["tokens"].is_array() && answer["count"] == answer["tokens"].size()) << where;
    else if (path == "/detokenize")
      EXPECT_TRUE(answer["prompt"].is_string()) << where;
    else
      EXPECT_TRUE(answer["choices"].is_array() && !answer["choices"].empty()) << where;
    return;
  }
  const std::vector<std::string> payloads = sse_payloads(r.body);
  ASSERT_FALSE(payloads.empty()) << where;
  EXPECT_EQ(payloads.back(), "[DONE]") << where;
  for (size_t i = 0; i + 1 < payloads.size(); ++i)
    EXPECT_TRUE(json::accept(payloads[i])) << payloads[i] << where;
}

TEST(ServerRequestFuzzTest, BadRequestsGetErrorsAndLoseNothing) {
  FakeEngine::Options options;
  options.token_delay = std::chrono::milliseconds(0);
  ServerHarness h({}, options);
  std::mt19937 rng(2026);
  int ok = 0, refused = 0;
  for (int i = 0; i < 2000; ++i) {
    const size_t seed = rng() % std::size(kSeeds);
    json body = json::parse(kSeeds[seed]);
    for (uint32_t m = 0, n = 1 + rng() % 3; m < n; ++m) mutate(body, rng);
    std::string text = body.dump();
    switch (rng() % 8) {  // sometimes the text itself: cut short, or a byte spoiled
      case 0:
        text.resize(rng() % (text.size() + 1));
        break;
      case 1:
        text[rng() % text.size()] = static_cast<char>(rng() % 256);
        break;
      default:
        break;
    }
    const std::string path = rng() % 10 == 0 ? kPaths[rng() % std::size(kPaths)] : kSeedPaths[seed];
    const HttpResult r = post(h.port, path, text);
    check_answer(r, path, text);
    if (::testing::Test::HasFatalFailure()) return;
    (r.status == 200 ? ok : refused) += 1;
  }
  // Both kinds happen (the mutations are not all fatal, nor all harmless).
  EXPECT_GT(ok, 100);
  EXPECT_GT(refused, 300);
  // Nothing is left in the engine, and the server still answers.
  EXPECT_TRUE(wait_for([&] { return h.engine->live() == 0; }, std::chrono::milliseconds(10000)));
  EXPECT_EQ(get(h.port, "/health/ready").status, 200);
  const HttpResult again = post(h.port, "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(again.status, 200) << again.body;
}

// Raw HTTP requests with random start lines, headers (lengths that lie, bad chunking, long or broken lines)
// and bodies, the connection half-closed after them: the server answers each with a status line (never a 5xx)
// or closes the connection, within seconds; afterwards it still serves.
TEST(ServerRequestFuzzTest, MalformedHttpGetsAnAnswerOrAClose) {
  FakeEngine::Options options;
  options.token_delay = std::chrono::milliseconds(0);
  ServerHarness h({}, options);
  std::mt19937 rng(77);
  const std::string body = R"({"prompt": "hi", "max_tokens": 2})";
  const std::vector<std::string> starts = {
      "POST /v1/completions HTTP/1.1",  "POST /v1/completions HTTP/1.0",
      "GET /health/live HTTP/1.1",      "PUT /v1/completions HTTP/1.1",
      "POST /v1//completions HTTP/1.1", "POST /" + std::string(9000, 'a') + " HTTP/1.1",
      "POST /v1/completions HTTP/9.9",  "\x01\xff garbage",
      "POST /v1/completions",           "GET /metrics HTTP/1.1",
      "POST /tokenize HTTP/1.1",        ""};
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = starts[rng() % starts.size()] + "\r\nHost: x\r\n";
    std::string payload = rng() % 4 == 0 ? std::string(rng() % 300, static_cast<char>(rng() % 256)) : body;
    const uint32_t length_kind = rng() % 6;
    if (length_kind == 0) text += "Content-Length: " + std::to_string(payload.size()) + "\r\n";
    if (length_kind == 1)
      text += "Content-Length: " + std::to_string(payload.size() + 1 + rng() % 100) + "\r\n";
    if (length_kind == 2) text += "Content-Length: " + std::to_string(rng() % (payload.size() + 1)) + "\r\n";
    if (length_kind == 3) text += rng() % 2 ? "Content-Length: -5\r\n" : "Content-Length: 12abc\r\n";
    if (length_kind == 4) {
      text += "Transfer-Encoding: chunked\r\n";
      char size[16];
      std::snprintf(size, sizeof(size), "%zx", payload.size() + (rng() % 3 == 0 ? 7 : 0));
      payload = std::string(size) + "\r\n" + payload + "\r\n" + (rng() % 2 ? "0\r\n\r\n" : "zz\r\n");
    }
    if (rng() % 5 == 0) text += "Content-Type: application/json\r\n";
    if (rng() % 6 == 0) text += "X-Long: " + std::string(20000, 'b') + "\r\n";
    if (rng() % 6 == 0) text += "no colon here\r\n";
    if (rng() % 8 == 0) text += "Expect: 100-continue\r\n";
    if (rng() % 4 == 0) text += "Connection: close\r\n";
    text += "\r\n" + payload;
    if (rng() % 6 == 0) text.resize(rng() % (text.size() + 1));  // cut anywhere
    RawConnection c(h.port);
    try {
      c.send_all(text);
    } catch (const std::runtime_error&) {  // the server may close before reading it all
    }
    c.shutdown_write();
    std::string got;
    try {
      for (std::string more; !(more = c.recv_some(std::chrono::milliseconds(10000))).empty();) got += more;
    } catch (const std::runtime_error& e) {
      ADD_FAILURE() << "no answer and no close within 10 s: " << e.what()
                    << "\nrequest: " << text.substr(0, 300);
      return;
    }
    if (got.empty()) continue;  // closed without an answer
    ++answered;
    ASSERT_TRUE(got.rfind("HTTP/1.1 ", 0) == 0 || got.rfind("HTTP/1.0 ", 0) == 0) << got.substr(0, 200);
    for (size_t at = got.find("HTTP/1."); at != std::string::npos; at = got.find("HTTP/1.", at + 1)) {
      if (at == 0 || (at >= 2 && got.compare(at - 2, 2, "\r\n") == 0)) {  // a status line
        EXPECT_NE(got[at + 9], '5') << got.substr(at, 200) << "\nrequest: " << text.substr(0, 300);
      }
    }
  }
  EXPECT_GT(answered, 200);  // (the others were closed without an answer)
  EXPECT_TRUE(wait_for([&] { return h.engine->live() == 0; }, std::chrono::milliseconds(10000)));
  EXPECT_EQ(get(h.port, "/health/ready").status, 200);
  EXPECT_EQ(post(h.port, "/v1/completions", body).status, 200);
}

}  // namespace
}  // namespace dsinfer::testing
