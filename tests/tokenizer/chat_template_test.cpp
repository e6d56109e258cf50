#include "tokenizer/chat_template.h"
#include <gtest/gtest.h>
TEST(ChatTemplate, Smoke) {
  dsinfer::ChatTemplate t("{{ 'a' }}");
  EXPECT_EQ(t.render(nlohmann::json::array(), false), "a");
}
