// expect_error: checks an HTTP answer is an OpenAI-shaped error with the given status, param and code.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "http_test_client.h"

namespace dsinfer::testing {

inline void expect_error(const HttpResult& r, int status, const std::string& param = "",
                         const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const nlohmann::json j = nlohmann::json::parse(r.body);
  ASSERT_TRUE(j.contains("error")) << r.body;
  const nlohmann::json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

}  // namespace dsinfer::testing
