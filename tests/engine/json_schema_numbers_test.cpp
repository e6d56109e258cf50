// response_format json_schema, numbers: integer bounds and multipleOf, number bounds of any decimal value
// (inclusive or exclusive), each checked at every digit of the answer, against exact arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "json_schema_test_util.h"

namespace dsinfer {
namespace {

using namespace json_schema_testing;

TEST(JsonSchemaRecognizer, IntegerBoundsHoldEveryPrefix) {
  const auto s = compiled(R"({"type": "integer", "minimum": 1, "maximum": 12})");
  for (int v = -20; v <= 130; ++v) EXPECT_EQ(accepts(*s, std::to_string(v)), v >= 1 && v <= 12) << v;
  EXPECT_EQ(accepted_prefix(*s, "0"), 0u);
  EXPECT_EQ(accepted_prefix(*s, "-1"), 0u);  // no negative value fits
  EXPECT_EQ(accepted_prefix(*s, "13"), 1u);  // "1" can still be 1, 10, 11, 12
  const auto wide = compiled(R"({"type": "integer", "exclusiveMinimum": -6, "maximum": 250.5})");
  for (int v = -300; v <= 300; ++v) EXPECT_EQ(accepts(*wide, std::to_string(v)), v > -6 && v <= 250) << v;
  EXPECT_TRUE(accepts(*wide, "-0"));
  // Inside an object: the digits that cannot end in range are refused where they come.
  const auto o = compiled(R"({"type": "object", "properties": {"pct": {"type": "integer", "minimum": 0,
      "maximum": 100}}, "required": ["pct"]})");
  EXPECT_TRUE(accepts(*o, R"({"pct": 100})"));
  EXPECT_EQ(accepted_prefix(*o, R"({"pct": 101})"), 10u);
  EXPECT_EQ(accepted_prefix(*o, R"({"pct": -1})"), 8u);
  EXPECT_EQ(accepted_prefix(*o, R"({"pct": 1000})"), 11u);
  // Beyond 18 digits: clamped to what an answer can hold.
  const auto big = compiled(R"({"type": "integer", "minimum": 0})");
  EXPECT_TRUE(accepts(*big, "999999999999999999"));
  EXPECT_FALSE(accepts(*big, "1000000000000000000"));
}

TEST(JsonSchemaRecognizer, NumberBoundsOfIntegerValue) {
  const auto unit = compiled(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "0.5", "1", "1.0", "1.000", "0.999", "0.0"})
    EXPECT_TRUE(accepts(*unit, ok)) << ok;
  for (const char* bad : {"1.5", "1.01", "-0.1", "2", "10", "1e0", "0.5e1"})
    EXPECT_FALSE(accepts(*unit, bad)) << bad;
  const auto sym = compiled(R"({"type": "number", "minimum": -1, "maximum": 1})");
  for (const char* ok : {"-0.5", "-1.0", "-1", "-0", "0.25", "-0.999"}) EXPECT_TRUE(accepts(*sym, ok)) << ok;
  for (const char* bad : {"-1.5", "-1.01", "-2", "1.1"}) EXPECT_FALSE(accepts(*sym, bad)) << bad;
  const auto score = compiled(R"({"type": "number", "minimum": 10, "maximum": 250})");
  for (const char* ok : {"10", "10.5", "99.99", "250", "250.0", "123"})
    EXPECT_TRUE(accepts(*score, ok)) << ok;
  for (const char* bad : {"9.99", "250.5", "251", "1", "0.5", "2500"})
    EXPECT_FALSE(accepts(*score, bad)) << bad;
  EXPECT_EQ(accepted_prefix(*score, "9.5"), 1u);  // 9 cannot end in range, but "9" may still become 90-99
}

// Any decimal bound, inclusive or exclusive, compared digit by digit as the bound was written.
TEST(JsonSchemaRecognizer, NumberBoundsOfAnyValue) {
  struct Case {
    const char* schema;
    std::vector<const char*> ok, bad;
  };
  const std::vector<Case> cases = {
      // pydantic's PositiveFloat (gt=0).
      {R"({"type": "number", "exclusiveMinimum": 0})",
       {"0.5", "3", "0.001", "12.0", "0.0000001"},
       {"0", "0.0", "0.000", "-1", "-0", "-0.5"}},
      // A price: ge=0.5, le=99.99.
      {R"({"type": "number", "minimum": 0.5, "maximum": 99.99})",
       {"0.5", "0.50", "0.51", "1", "99.99", "99.990", "99.9", "42.123456"},
       {"0", "0.4", "0.49", "99.991", "100", "99.999", "-1"}},
      // A probability in [0, 1).
      {R"({"type": "number", "minimum": 0, "exclusiveMaximum": 1})",
       {"0", "0.0", "0.999", "0.5"},
       {"1", "1.0", "-0.1"}},
      // Negative, both ends fractional, one open.
      {R"({"type": "number", "minimum": -2.5, "exclusiveMaximum": -1.25})",
       {"-2.5", "-2.49", "-1.3", "-1.251", "-2", "-1.2500001"},
       {"-2.51", "-1.25", "-1.2", "-1.24", "-3", "0", "-1"}},
      // Both ends in one integer part, open: (0.25, 0.75).
      {R"({"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 0.75})",
       {"0.26", "0.5", "0.7499", "0.250001"},
       {"0.25", "0.75", "0.2", "0.8", "0", "1"}},
      // An exact value: minimum = maximum = 2.5.
      {R"({"type": "number", "minimum": 2.5, "maximum": 2.5})", {"2.5", "2.50"}, {"2.4", "2.51", "2", "3"}},
      // Exponents in the bounds (as a double prints them), the tighter of two bounds, -0 (equal to 0).
      {R"({"type": "number", "minimum": 1e-5, "maximum": 1.5e3, "exclusiveMaximum": 2000})",
       {"0.00001", "0.5", "1500", "1500.0"},
       {"0.000009", "1500.01", "0"}},
      {R"({"type": "number", "minimum": 0, "exclusiveMinimum": 0, "maximum": 5})", {"0.1", "5"}, {"0", "-0"}},
      {R"({"type": "number", "minimum": 0})", {"-0", "-0.0", "0", "7"}, {"-0.1", "-1"}},
      {R"({"type": "number", "exclusiveMaximum": 0})", {"-0.5", "-3"}, {"0", "-0", "-0.0", "0.1"}},
  };
  for (const Case& c : cases) {
    const auto s = compiled(c.schema);
    for (const char* v : c.ok) EXPECT_TRUE(accepts(*s, v)) << c.schema << " " << v;
    for (const char* v : c.bad) EXPECT_FALSE(accepts(*s, v)) << c.schema << " " << v;
  }
  // The first digit that leaves the range is refused, not only the end.
  const auto price = compiled(R"({"type": "number", "minimum": 0.5, "maximum": 99.99})");
  EXPECT_EQ(accepted_prefix(*price, "0.49"), 2u);
  EXPECT_EQ(accepted_prefix(*price, "99.991"), 5u);
  EXPECT_EQ(accepted_prefix(*price, "100"), 2u);
  EXPECT_EQ(accepted_prefix(*price, "1e2"), 1u);  // no exponent in a bounded number
  // An open high bound's last digit is refused: after 0.7 only 0.70000... (never below 0.7) could follow.
  EXPECT_EQ(accepted_prefix(*compiled(R"({"type": "number", "minimum": 0, "exclusiveMaximum": 0.7})"), "0.7"),
            2u);
}

// multipleOf on integers with and without bounds: every integer from -300 to 300 is accepted exactly when it
// is a multiple in range, and every prefix taken can still end so (a digit is refused where it cannot).
TEST(JsonSchemaRecognizer, IntegerMultiplesAgreeWithArithmetic) {
  for (int64_t m : {1, 2, 3, 7, 10, 25, 1000}) {
    for (const char* bounds : {"", R"(, "minimum": -41)", R"(, "minimum": 5, "exclusiveMaximum": 260)",
                               R"(, "maximum": -3)", R"(, "minimum": -100, "maximum": 100)"}) {
      const std::string text = str_cat(R"({"type": "integer", "multipleOf": )", m, bounds, "}");
      const std::string error = compile_error(text);
      const ojson schema = ojson::parse(text);
      const int64_t lo = schema.contains("minimum") ? schema["minimum"].get<int64_t>() : INT64_MIN;
      const int64_t hi = schema.contains("maximum")            ? schema["maximum"].get<int64_t>()
                         : schema.contains("exclusiveMaximum") ? schema["exclusiveMaximum"].get<int64_t>() - 1
                                                               : INT64_MAX;
      bool any = false;
      for (int64_t v = std::max<int64_t>(lo, -2000); v <= std::min<int64_t>(hi, 2000); ++v)
        any = any || v % m == 0;
      EXPECT_EQ(error.empty(), any) << text << " " << error;
      if (!error.empty()) continue;
      const auto s = compiled(text);
      for (int64_t v = -300; v <= 300; ++v) {
        const std::string value = std::to_string(v);
        const bool expected = v >= lo && v <= hi && v % m == 0;
        EXPECT_EQ(accepts(*s, value), expected) << text << " " << value;
        // Each accepted prefix of a refused value is one some multiple in range still begins with.
        const size_t taken = accepted_prefix(*s, value);
        const std::string prefix = value.substr(0, taken);
        bool extends = prefix.empty() || prefix == "-";
        for (int64_t w = -3000; w <= 3000 && !extends; ++w)
          extends = w >= lo && w <= hi && w % m == 0 && std::to_string(w).rfind(prefix, 0) == 0;
        EXPECT_TRUE(extends || taken == value.size()) << text << " " << value << " taken " << prefix;
      }
    }
  }
  // Larger values: the multiples of 7 near 10^12.
  const auto seven = compiled(R"({"type": "integer", "multipleOf": 7})");
  EXPECT_TRUE(accepts(*seven, "1000000000006"));  // 7 x 142857142858
  EXPECT_FALSE(accepts(*seven, "1000000000003"));
  EXPECT_TRUE(accepts(*seven, "-1000000000006"));
  EXPECT_TRUE(accepts(*seven, "700000000000000007"));  // 18 digits
}

// Every pair of bounds from a set of decimals, against exact arithmetic (values and bounds scaled by 10^6):
// a number is accepted exactly when it lies in the range, and a range is refused exactly when it is empty.
TEST(JsonSchemaRecognizer, NumberBoundsAgreeWithExactArithmetic) {
  const std::vector<std::string> bounds = {"-2.5", "-1", "-0.125", "0",     "0.05", "0.5",
                                           "0.75", "1",  "1.5",    "3.125", "10"};
  auto scaled = [](const std::string& text) {  // text * 10^6, exactly (at most 6 fraction digits)
    const bool negative = text[0] == '-';
    const std::string digits = negative ? text.substr(1) : text;
    const size_t dot = digits.find('.');
    std::string frac = dot == std::string::npos ? "" : digits.substr(dot + 1);
    frac.resize(6, '0');
    const int64_t v = std::stoll(digits.substr(0, dot)) * 1000000 + std::stoll(frac);
    return negative ? -v : v;
  };
  std::vector<std::string> values;
  for (const char* sign : {"", "-"})
    for (const char* whole : {"0", "1", "2", "3", "9", "10", "12"})
      for (const char* frac : {"", ".0", ".05", ".1", ".125", ".25", ".5", ".75", ".9", ".999", ".0001"})
        values.push_back(str_cat(sign, whole, frac));
  int schemas = 0, refused = 0;
  for (int lo = -1; lo < static_cast<int>(bounds.size()); ++lo) {
    for (int hi = -1; hi < static_cast<int>(bounds.size()); ++hi) {
      for (int open = 0; open < 4; ++open) {
        const bool lo_open = open & 1, hi_open = open & 2;
        std::string text = R"({"type": "number")";
        if (lo >= 0) text += str_cat(", \"", lo_open ? "exclusiveMinimum" : "minimum", "\": ", bounds[lo]);
        if (hi >= 0) text += str_cat(", \"", hi_open ? "exclusiveMaximum" : "maximum", "\": ", bounds[hi]);
        text += "}";
        auto in_range = [&](int64_t v) {
          if (lo >= 0 && (lo_open ? v <= scaled(bounds[lo]) : v < scaled(bounds[lo]))) return false;
          if (hi >= 0 && (hi_open ? v >= scaled(bounds[hi]) : v > scaled(bounds[hi]))) return false;
          return true;
        };
        bool empty = false;
        if (lo >= 0 && hi >= 0) {
          const int64_t a = scaled(bounds[lo]), b = scaled(bounds[hi]);
          empty = a > b || (a == b && (lo_open || hi_open));
        }
        const std::string error = compile_error(text);
        EXPECT_EQ(!error.empty(), empty) << text << " " << error;
        if (!error.empty()) {
          ++refused;
          continue;
        }
        ++schemas;
        const auto s = compiled(text);
        for (const std::string& v : values)
          EXPECT_EQ(accepts(*s, v), in_range(scaled(v))) << text << " " << v;
      }
    }
  }
  EXPECT_EQ(schemas + refused, 12 * 12 * 4);
  EXPECT_GT(schemas, 300);  // (the pairs with lower > upper are refused)
}

}  // namespace
}  // namespace dsinfer
