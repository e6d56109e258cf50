// Chat prompts (engine/prompt.h): every message the caller sends is in the rendering, or the render fails
// with the message's index and role; roles and fields DeepSeek's template handles render as before.
#include "engine/prompt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../tokenizer/tokenizer_test_util.h"
#include "core/error.h"

namespace dsinfer {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string error_of(const json& messages) {
  try {
    render_chat(testing::deepseek_v3(), messages, true);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatPrompt, EveryRoleTheTemplateHandlesRenders) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "content": "R"}, {"role": "assistant", "content": "A"},
    {"role": "user", "content": ""}])");
  const std::string out = render_chat(testing::deepseek_v3(), messages, true);
  for (const char* text : {"S", "Q", "R", "A"}) EXPECT_THAT(out, HasSubstr(text));
  EXPECT_EQ(out.find("[[dsinfer:"), std::string::npos) << "the markers are only for the check";
}

TEST(ChatPrompt, AMessageTheTemplateDropsIsRefused) {
  // DeepSeek's template renders system, user, assistant and tool messages only.
  const std::string msg = error_of(json::parse(R"([{"role": "user", "content": "Q"},
                                                   {"role": "wizard", "content": "abracadabra"}])"));
  EXPECT_THAT(msg, HasSubstr("messages[1]"));
  EXPECT_THAT(msg, HasSubstr("'wizard'"));
  EXPECT_THAT(error_of(json::parse(R"([{"role": "developer", "content": "be terse"}])")),
              HasSubstr("messages[0] (role 'developer')"));
  // A dropped message with no content loses nothing and is not refused.
  EXPECT_EQ(error_of(json::parse(R"([{"role": "user", "content": "Q"}, {"role": "wizard", "content": ""}])")),
            "");
}

}  // namespace
}  // namespace dsinfer
