// Environment settings (core/env_choice.h): a value is one of the named choices or unset; anything else is
// an error naming the variable and the choices.
#include "core/env_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace dsinfer {
namespace {

TEST(EnvChoiceTest, NamedValuesGiveTheirIndexAndUnsetGivesTheDefault) {
  EXPECT_EQ(parse_env_choice("DSINFER_X", "v1", {"v1", "v2", "v2x2"}, -1), 0);
  EXPECT_EQ(parse_env_choice("DSINFER_X", "v2x2", {"v1", "v2", "v2x2"}, -1), 2);
  EXPECT_EQ(parse_env_choice("DSINFER_X", nullptr, {"v1", "v2"}, -1), -1);
  EXPECT_EQ(parse_env_choice("DSINFER_X", "", {"v1", "v2"}, 7), 7);
}

TEST(EnvChoiceTest, AnyOtherValueIsAnErrorNamingTheChoices) {
  for (const char* bad : {"v3", "V1", "v1 ", "1", "true"}) {
    try {
      parse_env_choice("DSINFER_MLA_KERNEL", bad, {"v1", "v2", "v2x2"}, -1);
      FAIL() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("DSINFER_MLA_KERNEL"), std::string::npos) << m;
      EXPECT_NE(m.find("v1|v2|v2x2"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("\"") + bad + "\""), std::string::npos) << m;
    }
  }
}

TEST(EnvChoiceTest, SwitchesTakeZeroOrOne) {
  const char* var = "DSINFER_ENV_CHOICE_TEST_SWITCH";
  ::unsetenv(var);
  EXPECT_TRUE(env_switch(var, true));
  EXPECT_FALSE(env_switch(var, false));
  ::setenv(var, "0", 1);
  EXPECT_FALSE(env_switch(var, true));
  ::setenv(var, "1", 1);
  EXPECT_TRUE(env_switch(var, false));
  ::setenv(var, "off", 1);
  EXPECT_THROW(env_switch(var, true), Error);
  ::setenv(var, "", 1);
  EXPECT_TRUE(env_switch(var, true));
  ::unsetenv(var);
}

}  // namespace
}  // namespace dsinfer
