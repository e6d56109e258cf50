// Request bodies that would cost the server more than any real request: JSON nested past the depth limit.
// It is a 400, and the server keeps serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "expect_error.h"
#include "http_test_client.h"
#include "server/json_depth.h"
#include "server_harness.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonDepthTest, CountsBracketsOutsideStrings) {
  using server::json_deeper_than;
  EXPECT_FALSE(json_deeper_than(nested_arrays(64), 64));
  EXPECT_TRUE(json_deeper_than(nested_arrays(65), 64));
  EXPECT_FALSE(json_deeper_than(R"({"a": [1, {"b": []}], "c": {}})", 4));
  EXPECT_TRUE(json_deeper_than(R"({"a": [1, {"b": []}], "c": {}})", 3));
  // Brackets in strings, after escaped quotes and backslashes, are text.
  EXPECT_FALSE(json_deeper_than(R"({"a": "[[[{{{", "b": "\"[[[", "c": "\\"})", 1));
  EXPECT_TRUE(json_deeper_than(R"({"c": "\\", "d": [[]]})", 2));
  // Siblings do not add up.
  EXPECT_FALSE(json_deeper_than("[[], [], [[]], []]", 3));
}

// 200,000 nested arrays overflowed the stack when the messages were copied (SIGSEGV, the whole server gone).
TEST(ServerLimitsTest, DeeplyNestedJsonIsRefusedAndTheServerStaysUp) {
  ServerHarness h;
  const std::string deep = nested_arrays(200000);
  expect_error(post(h.port, "/v1/chat/completions", R"({"messages": )" + deep + "}"), 400, "",
               "invalid_json");
  expect_error(post(h.port, "/tokenize", R"({"messages": )" + deep + "}"), 400, "", "invalid_json");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "extra": )" + deep + "}"), 400, "",
               "invalid_json");
  // At the limit the body is parsed as usual (here: a wrong type, not a depth error).
  expect_error(post(h.port, "/v1/chat/completions", R"({"messages": )" + nested_arrays(63) + "}"), 400,
               "messages", "invalid_value");
  EXPECT_EQ(post(h.port, "/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "[[[["}]}],
                     "max_tokens": 2})")
                .status,
            200);
}

}  // namespace
}  // namespace dsinfer::testing
