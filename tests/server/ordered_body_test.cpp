// OrderedBody: parts of a request body with its text's key order (tool parameters, response_format schemas),
// the text parsed once for all of them; the parsed body's sorted copy where the text cannot serve.
#include "server/ordered_body.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsinfer::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::vector<std::string> keys(const ordered_json& j) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
  return out;
}

const std::string kBody =
    R"({"tools": [{"function": {"parameters": {"properties": {"z": {}, "a": {}, "m": {}}}}},
                  {"function": {"parameters": {"properties": {"y": {}, "b": {}}}}}],
        "response_format": {"json_schema": {"schema": {"properties": {"q": {}, "c": {}}}}}})";

TEST(OrderedBody, EveryPartKeepsTheTextsKeyOrder) {
  const json parsed = json::parse(kBody);
  OrderedBody ordered(kBody);
  const char* p0 = "/tools/0/function/parameters/properties";
  const char* p1 = "/tools/1/function/parameters/properties";
  const char* p2 = "/response_format/json_schema/schema/properties";
  EXPECT_EQ(keys(ordered.part(ordered_json::json_pointer(p0), parsed.at(json::json_pointer(p0)))),
            (std::vector<std::string>{"z", "a", "m"}));
  EXPECT_EQ(keys(ordered.part(ordered_json::json_pointer(p1), parsed.at(json::json_pointer(p1)))),
            (std::vector<std::string>{"y", "b"}));
  EXPECT_EQ(keys(ordered.part(ordered_json::json_pointer(p2), parsed.at(json::json_pointer(p2)))),
            (std::vector<std::string>{"q", "c"}));
}

TEST(OrderedBody, WithoutTheTextThePartIsTheParsedValueSorted) {
  const json parsed = json::parse(kBody);
  const char* p0 = "/tools/0/function/parameters/properties";
  const json& value = parsed.at(json::json_pointer(p0));
  for (const std::string& text : {std::string(), std::string("{not json"), std::string(R"({"tools": []})")}) {
    OrderedBody ordered(text);
    const ordered_json part = ordered.part(ordered_json::json_pointer(p0), value);
    EXPECT_EQ(keys(part), (std::vector<std::string>{"a", "m", "z"})) << "text: " << text;
    EXPECT_EQ(json::parse(part.dump()), value);
  }
}

}  // namespace
}  // namespace dsinfer::server
