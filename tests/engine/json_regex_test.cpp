// JsonRegex: patterns and string formats as DFAs over characters, checked against std::regex (ECMAScript,
// the syntax JSON Schema's `pattern` uses) on the same strings, with the unsupported parts refused.
#include "engine/json_regex.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include "core/error.h"

namespace dsinfer {
namespace {

// Runs the DFA over an ASCII string: matched, or the offset of the first character refused (-1: none).
bool matches(const JsonRegex& r, const std::string& s, int* refused_at = nullptr) {
  uint16_t state = r.start();
  for (size_t i = 0; i < s.size(); ++i) {
    state = r.next(state, JsonRegex::symbol(static_cast<uint8_t>(s[i])));
    if (state == JsonRegex::kDead) {
      if (refused_at) *refused_at = static_cast<int>(i);
      return false;
    }
  }
  if (refused_at) *refused_at = -1;
  return r.accepting(state);
}

TEST(JsonRegex, AgreesWithStdRegexOnSearches) {
  const std::vector<std::string> patterns = {
      "^[0-9]{5}$",
      "abc",
      "^a(b|cd)*e$",
      "^[A-Z]{2,3}-\\d{1,4}$",
      "^\\w+@\\w+\\.com$",
      "x?y+z*",
      "^[^aeiou]+$",
      "^(?:ab){2,}$",
      "^\\s*\\S+\\s*$",
      "^a.c$",
      "^[a-f\\d]{4}$",
      "q{0,2}r$",
      "^\\(\\d{3}\\) \\d{3}-\\d{4}$",
      "^$",
      "^[-+]?\\d+(\\.\\d+)?$",
  };
  std::mt19937 rng(3);
  const std::string alphabet = "abcdeqrxyz0123456789-+.@ ()ABZ_";
  for (const std::string& p : patterns) {
    const JsonRegex r = JsonRegex::compile(p);
    const std::regex oracle(p, std::regex::ECMAScript);
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      for (size_t n = rng() % 12; n > 0; --n) s += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(matches(r, s), std::regex_search(s, oracle)) << p << " on '" << s << "'";
    }
  }
  // Refused where no completion can match: the first impossible character.
  int at = 0;
  EXPECT_FALSE(matches(JsonRegex::compile("^[0-9]{5}$"), "12a45", &at));
  EXPECT_EQ(at, 2);
  EXPECT_FALSE(matches(JsonRegex::compile("^[0-9]{5}$"), "123456", &at));
  EXPECT_EQ(at, 5);
  EXPECT_FALSE(matches(JsonRegex::compile("^[0-9]{5}$"), "1234", &at));
  EXPECT_EQ(at, -1);  // a prefix: not refused, not matched yet
}

TEST(JsonRegex, FormatsMatchTheirRfcShapes) {
  JsonRegex date, date_time, time, uuid, ipv4;
  ASSERT_TRUE(JsonRegex::format("date", date));
  ASSERT_TRUE(JsonRegex::format("date-time", date_time));
  ASSERT_TRUE(JsonRegex::format("time", time));
  ASSERT_TRUE(JsonRegex::format("uuid", uuid));
  ASSERT_TRUE(JsonRegex::format("ipv4", ipv4));
  JsonRegex other;
  EXPECT_FALSE(JsonRegex::format("email", other));  // an annotation: not enforced
  EXPECT_TRUE(matches(date, "2024-02-29"));
  EXPECT_FALSE(matches(date, "2024-13-01"));
  EXPECT_FALSE(matches(date, "2024-1-01"));
  EXPECT_TRUE(matches(date_time, "2024-01-02T03:04:05Z"));
  EXPECT_TRUE(matches(date_time, "2024-01-02t23:59:60.123+05:30"));
  EXPECT_FALSE(matches(date_time, "2024-01-02T24:00:00Z"));
  EXPECT_FALSE(matches(date_time, "2024-01-02 03:04:05"));  // no offset
  EXPECT_TRUE(matches(time, "12:30:00-08:00"));
  EXPECT_TRUE(matches(uuid, "123e4567-e89b-12d3-a456-426614174000"));
  EXPECT_FALSE(matches(uuid, "123e4567e89b12d3a456426614174000"));
  EXPECT_TRUE(matches(ipv4, "255.255.0.1"));
  EXPECT_FALSE(matches(ipv4, "256.1.1.1"));
  EXPECT_FALSE(matches(ipv4, "1.2.3"));
}

TEST(JsonRegex, RefusesWhatItDoesNotFollow) {
  for (const char* p : {"(?=a)b", "a*?", "(a)\\1", "\\bword", "caf\xC3\xA9", "a{100}", "^a|b$", "[z-a]",
                        "(ab", "ab)", "*a", "a{2", "\\p{L}", "[]"}) {
    EXPECT_THROW(JsonRegex::compile(p), Error) << p;
  }
  EXPECT_THROW(JsonRegex::compile("^a$b"), Error);
  // Automata that would grow too large are refused early (a pattern compiles on the server's I/O thread).
  for (const char* p : {"(.{1,64}){64}", "(a|b)*a(a|b){11}", "(.{0,60}x){20}"})
    EXPECT_THROW(JsonRegex::compile(p), Error) << p;
  EXPECT_THROW(JsonRegex::compile("^[a]{0}b[c]{0}$x"), Error);
}

}  // namespace
}  // namespace dsinfer
