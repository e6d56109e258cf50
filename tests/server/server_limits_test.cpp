// Request bodies that would cost the server more than any real request: JSON nested past the depth limit,
// oversized stop lists, out-of-range stop token ids, more choices than the queue could ever hold. Each is a
// 400 naming the field, and the server keeps serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/sampling_params.h"
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

// Each stop string is searched for after every generated token of every choice: the lists are bounded.
TEST(ServerLimitsTest, StopListsAreBounded) {
  ServerHarness h;
  auto with = [&](const json& extra) {
    json body = {{"prompt", "x"}, {"max_tokens", 2}};
    body.update(extra);
    return post(h.port, "/v1/completions", body.dump());
  };
  const size_t kStops = SamplingParams::kMaxStopStrings, kBytes = SamplingParams::kMaxStopStringBytes,
               kIds = SamplingParams::kMaxStopTokenIds;
  EXPECT_EQ(with({{"stop", std::vector<std::string>(kStops, std::string(kBytes, 'q'))},
                  {"stop_token_ids", std::vector<int32_t>(kIds, 7)}})
                .status,
            200);
  expect_error(with({{"stop", std::vector<std::string>(kStops + 1, "q")}}), 400, "stop", "invalid_value");
  expect_error(with({{"stop", std::string(kBytes + 1, 'q')}}), 400, "stop", "invalid_value");
  expect_error(with({{"stop", {"q", std::string(kBytes + 1, 'q')}}}), 400, "stop", "invalid_value");
  expect_error(with({{"stop_token_ids", std::vector<int32_t>(kIds + 1, 7)}}), 400, "stop_token_ids",
               "invalid_value");
  // A million stop strings in a 4 MB body: refused by count, the server still serves.
  expect_error(with({{"stop", std::vector<std::string>(1000000, "q")}}), 400, "stop", "invalid_value");
  EXPECT_EQ(with(json::object()).status, 200);
}

// Ids are checked before they are narrowed to int32: 4294967298 used to become token 2.
TEST(ServerLimitsTest, StopTokenIdsOutsideTheVocabularyAreRefused) {
  ServerHarness h;
  const int64_t vocab = h.engine->model_config().vocab_size;
  auto stop_ids = [&](const std::string& ids) {
    return post(h.port, "/v1/completions",
                R"({"prompt": "x", "max_tokens": 2, "stop_token_ids": )" + ids + "}");
  };
  for (const std::string& bad :
       {std::string("[4294967298]"), std::string("[-1]"), std::to_string(vocab),
        std::string("[18446744073709551615]"), std::string("[9223372036854775807]")}) {
    const std::string ids = bad.front() == '[' ? bad : "[" + bad + "]";
    HttpResult r = stop_ids(ids);
    expect_error(r, 400, "stop_token_ids", "invalid_value");
    EXPECT_NE(r.body.find(ids.substr(1, ids.size() - 2)), std::string::npos) << r.body;  // names the id
  }
  EXPECT_EQ(stop_ids("[0, " + std::to_string(vocab - 1) + "]").status, 200);
}

// More choices than max_queue_length can never be queued: 400, not a 429 the client would retry forever.
TEST(ServerLimitsTest, MoreChoicesThanTheQueueHoldsIsABadRequest) {
  ServerHarness h([](server::ServeConfig& c) { c.engine.max_queue_length = 4; });
  expect_error(post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "n": 5})"), 400, "n",
               "invalid_value");
  expect_error(post(h.port, "/v1/completions", R"({"prompt": ["x", "y", "z"], "max_tokens": 2, "n": 2})"),
               400, "n", "invalid_value");
  EXPECT_EQ(post(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "n": 4})").status, 200);
}

}  // namespace
}  // namespace dsinfer::testing
