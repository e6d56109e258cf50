// response_format json_schema: JsonSchema::compile (what it refuses, with the schema location),
// JsonSchemaRecognizer (documents the schema accepts go through byte by byte, others stop at the first wrong
// byte; random walks never reach a dead end and every document they complete validates), and the masks over
// DeepSeek-V3's vocabulary (equal to checking each token alone; sampling inside them gives valid answers).
// Number bounds and multiples: json_schema_numbers_test.cpp.
#include "engine/json_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/json_constraint.h"
#include "engine/json_schema_recognizer.h"
#include "json_schema_test_util.h"
#include "mask_cost.h"

namespace dsinfer {
namespace {

using namespace json_schema_testing;

TEST(JsonSchemaCompile, RefusesWhatItCannotEnforceAndSaysWhere) {
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 5}}})")
                .find("at #/properties/n: 'multipleOf' is not supported on numbers"),
            std::string::npos);
  EXPECT_NE(
      compile_error(R"({"type": "object", "properties": {"n": {"type": "integer", "uniqueItems": true}}})")
          .find("at #/properties/n: 'uniqueItems' is not supported"),
      std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "multipleOf": 0.5})").find("must be a whole number"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "multipleOf": 0})").find("must be a whole number"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9})")
                .find("no multiple of 'multipleOf'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"multipleOf": 3})").find("without \"type\": \"integer\""), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "number", "minimum": 1.5, "maximum": 1.25})").find("no number lies"),
            std::string::npos);
  EXPECT_NE(
      compile_error(R"({"type": "number", "exclusiveMinimum": 2, "maximum": 2})").find("no number lies"),
      std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "number", "minimum": 1e-50})").find("more than 40 fraction digits"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "number", "minimum": 1e20})").find("at most 18 integer digits"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": 1e20})").find("at most 18 digits"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "number", "maximum": "1"})").find("'maximum' must be a number"),
            std::string::npos);
  EXPECT_EQ(compile_error(R"({"type": "number", "maximum": 1e20, "minimum": -1e30})"), "");  // no constraint
  EXPECT_NE(compile_error(R"({"minimum": 0})").find("without \"type\": \"integer\""), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})")
                .find("required property \"b\" is not among 'properties'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {"a": {}}}]})")
                .find("needs a discriminator"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "#/$defs/missing"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "https://example.com/s.json"})").find("only references into this"),
            std::string::npos);
  EXPECT_NE(compile_error("false").find("allows no value"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "date"})").find("unknown type \"date\""), std::string::npos);
  EXPECT_NE(compile_error(R"({"anyOf": [{"$ref": "#"}]})").find("refers to itself"), std::string::npos);
  // A required property that always needs another level: no finite answer.
  EXPECT_NE(
      compile_error(R"({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]})")
          .find("without end"),
      std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("below 'minItems'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "enum": [1, 2]})").find("declared type"), std::string::npos);
  // oneOf: a value may match only one branch, so branches that overlap cannot be merged.
  EXPECT_NE(
      compile_error(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})").find("oneOf branches overlap"),
      std::string::npos);
  EXPECT_NE(
      compile_error(R"({"oneOf": [{"type": "string"}, {"const": "x"}]})").find("oneOf branches overlap"),
      std::string::npos);
  EXPECT_EQ(compile_error(R"({"anyOf": [{"type": "integer"}, {"type": "number"}]})"), "");
  EXPECT_EQ(compile_error(R"({"oneOf": [{"type": "string"}, {"type": "null"}]})"), "");
  EXPECT_NE(compile_error(R"({"type": "string", "minLength": 3, "maxLength": 2})").find("below 'minLength'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "maxLength": 70000})").find("above 65535"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"anyOf": [{"type": "string", "maxLength": 3}, {"const": "long value"}]})")
                .find("length bounds"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"allOf": [{"type": "string"}, {"type": "string"}]})").find("allOf"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array", "additionalItems": false})").find("applies to nothing"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"prefixItems": [{}], "additionalItems": false})").find("use 'items'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"prefixItems": {"type": "string"}})").find("must be a list of schemas"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"prefixItems": [{}], "items": false, "minItems": 2})")
                .find("at #: 'items' is false but 'minItems' asks for more than 1 items"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array", "prefixItems": [{"type": "string"}, {"uniqueItems": true}]})")
                .find("at #/prefixItems/1: 'uniqueItems'"),
            std::string::npos);
  // A tuple whose second item must always hold another such tuple: no finite answer.
  EXPECT_NE(compile_error(R"({"prefixItems": [{"type": "null"}, {"$ref": "#"}], "minItems": 2})")
                .find("without end"),
            std::string::npos);
  // A chain of references deeper than the compiler recurses: refused, not a crash.
  ojson chain = {{"$ref", "#/$defs/d0"}};
  for (int i = 0; i < 600; ++i)
    chain["$defs"][str_cat("d", i)] = {{"type", "array"}, {"items", {{"$ref", str_cat("#/$defs/d", i + 1)}}}};
  chain["$defs"]["d600"] = {{"type", "null"}};
  EXPECT_THROW(JsonSchema::compile(chain), Error);
  // Annotations and unknown keywords are not constraints.
  EXPECT_EQ(compile_error(R"({"title": "T", "description": "d", "type": "string", "format": "date-time",
                             "default": "x", "examples": ["y"], "x-vendor": 1})"),
            "");
}

// Requests send anything: keywords with values of every type, nested at random. Each one compiles or is
// refused with dsinfer::Error (the server's 400), never another exception, and feeding a compiled one bytes
// never fails.
TEST(JsonSchemaCompile, MalformedSchemasAreRefusedWithErrors) {
  std::mt19937 rng(17);
  const char* keys[] = {"type",
                        "properties",
                        "required",
                        "additionalProperties",
                        "items",
                        "minItems",
                        "maxItems",
                        "enum",
                        "const",
                        "anyOf",
                        "oneOf",
                        "allOf",
                        "$ref",
                        "minLength",
                        "maxLength",
                        "minimum",
                        "maximum",
                        "exclusiveMinimum",
                        "exclusiveMaximum",
                        "nullable",
                        "$defs",
                        "title"};
  const std::vector<std::string> words = {"string", "integer", "object", "#", "#/$defs/a", "null"};
  std::function<ojson(int)> junk = [&](int depth) -> ojson {
    switch (rng() % 9) {
      case 0:
        return ojson(static_cast<int64_t>(rng()) - (int64_t{1} << 31));
      case 1:
        return ojson(static_cast<double>(rng()) / 7.0 - 1e9);
      case 2:
        return ojson(words[rng() % words.size()]);
      case 3:
        return ojson(rng() % 2 == 0);
      case 4:
        return ojson(nullptr);
      case 5: {
        ojson a = ojson::array();
        for (int i = 0; depth > 0 && i < 3; ++i) a.push_back(junk(depth - 1));
        return a;
      }
      default: {
        ojson o = ojson::object();
        for (int i = 0; depth > 0 && i < 3; ++i) o[keys[rng() % std::size(keys)]] = junk(depth - 1);
        return o;
      }
    }
  };
  int compiled_count = 0;
  for (int i = 0; i < 20000; ++i) {
    const ojson schema = junk(4);
    std::shared_ptr<const JsonSchema> s;
    try {
      s = JsonSchema::compile(schema);
    } catch (const Error&) {
      continue;
    } catch (const std::exception& e) {
      FAIL() << "not a dsinfer::Error: " << e.what() << "\n" << schema.dump();
    }
    ++compiled_count;
    JsonSchemaRecognizer r(s.get());
    const std::string_view bytes = "{}[]\",:0123456789truefalsenull abc-.";
    for (int b = 0; b < 100; ++b) r.feed(static_cast<uint8_t>(bytes[rng() % bytes.size()]));
  }
  EXPECT_GT(compiled_count, 500);
}

TEST(JsonSchemaCompile, FunctionParametersMustDescribeAnObject) {
  const auto nullable = JsonSchema::compile(ojson::parse(R"({"type": ["object", "null"]})"), true);
  EXPECT_TRUE(accepts(*nullable, "{}"));
  EXPECT_FALSE(accepts(*nullable, "null"));
  EXPECT_TRUE(accepts(*JsonSchema::compile(ojson::parse("{}"), true), R"({"any": [1]})"));
  EXPECT_THROW(JsonSchema::compile(ojson::parse(R"({"type": "string"})"), true), Error);
  // Embedded in text (free_after): once the object is closed anything may follow.
  JsonSchemaRecognizer r(nullable.get(), /*free_after=*/true);
  EXPECT_TRUE(r.feed(std::string_view("{}\n```")));
}

TEST(JsonSchemaCompile, CachedCompilationsAreShared) {
  const ojson a = ojson::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}, "y": {}}})");
  const ojson b = ojson::parse(R"({"type": "object", "properties": {"y": {}, "x": {"type": "integer"}}})");
  const auto first = JsonSchema::compile_cached(a);
  EXPECT_EQ(JsonSchema::compile_cached(a), first);
  EXPECT_NE(JsonSchema::compile_cached(b), first);        // another key order is another schema
  EXPECT_NE(JsonSchema::compile_cached(a, true), first);  // and so is an object root
  EXPECT_THROW(JsonSchema::compile_cached(ojson::parse(R"({"pattern": "x"})")), Error);
  for (size_t i = 0; i <= JsonSchema::kCachedSchemas; ++i)
    JsonSchema::compile_cached(ojson::parse(str_cat(R"({"const": )", i, "}")));
  EXPECT_NE(JsonSchema::compile_cached(a), first);  // evicted by the newer ones, compiled again
}

TEST(JsonSchemaRecognizer, ObjectsFollowTheirPropertiesInOrder) {
  const auto s = compiled(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name", "age"], "additionalProperties": false})");
  EXPECT_TRUE(accepts(*s, R"({"name": "Ada", "age": 36})"));
  EXPECT_TRUE(accepts(*s, R"({"name":"Ada","age":-1,"tags":["a","b"]})"));
  EXPECT_TRUE(accepts(*s, "{\n  \"name\": \"\\u00e9\",\n  \"age\": 0\n}"));
  EXPECT_FALSE(accepts(*s, R"({"name": "Ada"})"));                      // age is required
  EXPECT_EQ(accepted_prefix(*s, R"({"name": "Ada"})"), 14u);            // '}' before the required age
  EXPECT_EQ(accepted_prefix(*s, R"({"age": 3})"), 2u);                  // "a" of "age" would skip "name"
  EXPECT_EQ(accepted_prefix(*s, R"({"name": 1})"), 9u);                 // a string value
  EXPECT_EQ(accepted_prefix(*s, R"({"name": "x", "age": 1.5})"), 22u);  // an integer
  EXPECT_EQ(accepted_prefix(*s, R"({"name": "x", "age": 1, "other": 1})"), 25u);  // no other keys
  EXPECT_EQ(accepted_prefix(*s, R"({"name": "x", "age": 1, "tags": [1]})"), 33u);
  EXPECT_EQ(accepted_prefix(*s, R"({"name": "x", "age": 1} )"), 23u);  // nothing after the value
  // Optional properties may be left out; a ',' only where a property can still follow.
  const auto t = compiled(R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})");
  EXPECT_TRUE(accepts(*t, "{}"));
  EXPECT_TRUE(accepts(*t, R"({"b": null})"));
  EXPECT_TRUE(accepts(*t, R"({"a": true, "b": null})"));
  EXPECT_EQ(accepted_prefix(*t, R"({"b": null, )"), 10u);
}

TEST(JsonSchemaRecognizer, StringLengthsCountCharacters) {
  const auto s = compiled(R"({"type": "string", "minLength": 2, "maxLength": 4})");
  EXPECT_TRUE(accepts(*s, "\"ab\""));
  EXPECT_TRUE(accepts(*s, "\"abcd\""));
  EXPECT_EQ(accepted_prefix(*s, "\"a\""), 2u);                            // too short to close
  EXPECT_EQ(accepted_prefix(*s, "\"abcde\""), 5u);                        // the fifth character
  EXPECT_TRUE(accepts(*s, "\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80!\""));  // é 中 😀 !: four characters
  EXPECT_TRUE(accepts(*s, "\"\\n\\t\\u00e9\""));                          // escapes are one character each
  EXPECT_TRUE(accepts(*s, "\"\\uD83D\\uDE00x\""));                        // a surrogate pair is one character
  EXPECT_FALSE(accepts(*s, "\"\\n\\n\\n\\n\\n\""));
  // Unbounded strings do not count (equal states stay equal), bounded ones do.
  const auto free_text = compiled(R"({"type": "string"})");
  JsonSchemaRecognizer a(free_text.get()), b(free_text.get());
  ASSERT_TRUE(a.feed(std::string_view("\"abc")));
  ASSERT_TRUE(b.feed(std::string_view("\"x")));
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.string_budget(), INT32_MAX);
  JsonSchemaRecognizer c(s.get());
  ASSERT_TRUE(c.feed(std::string_view("\"ab")));
  EXPECT_EQ(c.string_budget(), 2);
}

TEST(JsonSchemaRecognizer, PatternsAndFormatsHoldStrings) {
  const auto s = compiled(R"({"type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"})");
  EXPECT_TRUE(accepts(*s, "\"ABC-123\""));
  EXPECT_EQ(accepted_prefix(*s, "\"AB-123\""), 3u);
  EXPECT_EQ(accepted_prefix(*s, "\"ABC-12\""), 7u);  // not matched yet: no closing quote
  // JSON escapes stand for their characters; \u escapes are not taken in pattern strings.
  const auto e = compiled(R"({"type": "string", "pattern": "^a\nb$"})");
  EXPECT_TRUE(accepts(*e, "\"a\\nb\""));
  EXPECT_EQ(accepted_prefix(*e, "\"a\\u000ab\""), 3u);
  EXPECT_EQ(accepted_prefix(*e, "\"a\\tb\""), 3u);
  // Formats the decoder enforces, and one it leaves an annotation.
  const auto dt = compiled(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(accepts(*dt, "\"2024-05-06T07:08:09.5Z\""));
  EXPECT_FALSE(accepts(*dt, "\"tomorrow\""));
  EXPECT_TRUE(accepts(*compiled(R"({"type": "string", "format": "email"})"), "\"not checked\""));
  // Non-ASCII characters through '.', not through literals.
  EXPECT_TRUE(accepts(*compiled(R"({"type": "string", "pattern": "^.{2}$"})"), "\"\xC3\xA9\xE4\xB8\xAD\""));
  EXPECT_NE(compile_error(R"x({"type": "string", "pattern": "(?=x)"})x").find("at #: pattern: lookaround"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": "a", "maxLength": 3})").find("beside 'pattern'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"pattern": "a"})").find("without \"type\": \"string\""), std::string::npos);
  EXPECT_NE(
      compile_error(R"({"anyOf": [{"type": "string", "pattern": "a"}, {"const": "b"}]})").find("competes"),
      std::string::npos);
}

TEST(JsonSchemaRecognizer, ScalarsLiteralsAndChoices) {
  EXPECT_TRUE(accepts(*compiled(R"({"type": "number"})"), "-12.5e+3"));
  EXPECT_TRUE(accepts(*compiled(R"({"type": "integer"})"), "-120"));
  EXPECT_FALSE(accepts(*compiled(R"({"type": "integer"})"), "1.0"));
  EXPECT_FALSE(accepts(*compiled(R"({"type": "integer"})"), "1e3"));
  const auto e = compiled(R"({"enum": ["red", "green", 1, 10, null, {"k": [1, 2]}]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "10", "null", "{\"k\":[1,2]}"})
    EXPECT_TRUE(accepts(*e, ok)) << ok;
  for (const char* bad : {"\"re\"", "\"blue\"", "2", "100", "{\"k\": [1,2]}", "true"})
    EXPECT_FALSE(accepts(*e, bad)) << bad;
  // Optional[int] as pydantic writes it, and a type list.
  const auto o = compiled(R"({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null})");
  EXPECT_TRUE(accepts(*o, "7"));
  EXPECT_TRUE(accepts(*o, "null"));
  EXPECT_FALSE(accepts(*o, "\"7\""));
  const auto l = compiled(R"({"type": ["string", "boolean"]})");
  EXPECT_TRUE(accepts(*l, "\"x\""));
  EXPECT_TRUE(accepts(*l, "false"));
  EXPECT_FALSE(accepts(*l, "null"));
  // Literals a branch already covers merge into it; integer and number merge to number.
  const auto m =
      compiled(R"({"anyOf": [{"type": "string"}, {"const": "x"}, {"type": "integer"}, {"type": "number"}]})");
  EXPECT_TRUE(accepts(*m, "\"y\""));
  EXPECT_TRUE(accepts(*m, "2.5"));
  EXPECT_TRUE(accepts(*compiled(R"({"type": "string", "nullable": true})"), "null"));
}

TEST(JsonSchemaRecognizer, ArraysMapsRefsAndAnyValues) {
  const auto a = compiled(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_FALSE(accepts(*a, "[]"));
  EXPECT_TRUE(accepts(*a, "[1]"));
  EXPECT_TRUE(accepts(*a, "[1, 2, 3]"));
  EXPECT_EQ(accepted_prefix(*a, "[1, 2, 3, 4]"), 8u);
  // maxItems past 255 is counted too (it was taken as unbounded): 300 items, not 301.
  const auto wide = compiled(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 300})");
  std::string items = "[0";
  for (int i = 1; i < 300; ++i) items += ",0";
  EXPECT_TRUE(accepts(*wide, items + "]"));
  EXPECT_EQ(accepted_prefix(*wide, items + ",0]"), items.size());
  const auto map = compiled(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(accepts(*map, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(accepts(*map, R"({"a": "1"})"));
  EXPECT_TRUE(accepts(*compiled(R"({"type": "object", "additionalProperties": false})"), "{}"));
  EXPECT_FALSE(accepts(*compiled(R"({"type": "object", "additionalProperties": false})"), R"({"a": 1})"));
  // Recursion through $defs.
  const auto tree = compiled(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value", "children"]}}})");
  EXPECT_TRUE(accepts(
      *tree,
      R"({"value": 1, "children": [{"value": 2, "children": []}, {"value": 3, "children": [{"value": 4, "children": []}]}]})"));
  EXPECT_FALSE(accepts(*tree, R"({"value": 1, "children": [{"value": 2}]})"));
  // {} and true: any JSON value.
  for (const char* schema : {"{}", "true"}) {
    const auto any = compiled(schema);
    for (const char* doc : {"1", "\"s\"", "[1, {\"a\": [null, true]}]", "{\"x\": {\"y\": -0.5e1}}", "false"})
      EXPECT_TRUE(accepts(*any, doc)) << schema << " " << doc;
  }
}

// minProperties / maxProperties: counted for a map (pydantic's dict with min_length / max_length); with
// listed properties only where they hold anyway.
TEST(JsonSchemaRecognizer, MapsCountTheirKeys) {
  const auto map =
      compiled(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1,
      "maxProperties": 2})");
  EXPECT_FALSE(accepts(*map, "{}"));
  EXPECT_EQ(accepted_prefix(*map, "{}"), 1u);
  EXPECT_TRUE(accepts(*map, R"({"a": 1})"));
  EXPECT_TRUE(accepts(*map, R"({"a": 1, "b": 2})"));
  EXPECT_EQ(accepted_prefix(*map, R"({"a": 1, "b": 2, "c": 3})"), 15u);
  const auto none = compiled(R"({"type": "object", "maxProperties": 0})");
  EXPECT_TRUE(accepts(*none, "{}"));
  EXPECT_EQ(accepted_prefix(*none, R"({"a": 1})"), 1u);
  EXPECT_TRUE(accepts(*compiled(R"({"minProperties": 3})"), R"({"a": 1, "b": [], "c": null})"));
  // Listed properties: where the required ones already satisfy them.
  EXPECT_EQ(compile_error(R"({"properties": {"a": {}, "b": {}}, "required": ["a"], "minProperties": 1,
      "maxProperties": 5})"),
            "");
  EXPECT_NE(compile_error(R"({"properties": {"a": {}, "b": {}}, "required": ["a"], "minProperties": 2})")
                .find("'minProperties' above the number of required properties"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"properties": {"a": {}, "b": {}}, "maxProperties": 1})")
                .find("'maxProperties' below the number of listed properties"),
            std::string::npos);
  EXPECT_NE(
      compile_error(R"({"type": "object", "minProperties": 3, "maxProperties": 2})").find("no object fits"),
      std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "additionalProperties": false, "minProperties": 1})")
                .find("asks for keys that are not allowed"),
            std::string::npos);
  // A map that must hold a map that must hold ...: no finite answer.
  EXPECT_NE(compile_error(R"({"type": "object", "additionalProperties": {"$ref": "#"}, "minProperties": 1})")
                .find("without end"),
            std::string::npos);
}

TEST(JsonSchemaRecognizer, TuplesFollowTheirItemsInOrder) {
  // pydantic's tuple[int, str].
  const auto pair = compiled(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
      "minItems": 2, "maxItems": 2})");
  EXPECT_TRUE(accepts(*pair, R"([1, "a"])"));
  EXPECT_EQ(accepted_prefix(*pair, R"(["a", 1])"), 1u);
  EXPECT_EQ(accepted_prefix(*pair, R"([1, 2])"), 4u);
  EXPECT_FALSE(accepts(*pair, "[1]"));  // the string is required
  EXPECT_EQ(accepted_prefix(*pair, R"([1, "a", 2])"), 7u);
  // Shorter than the prefix is fine without minItems; after it, `items`.
  const auto rest = compiled(R"({"prefixItems": [{"const": "x"}], "items": {"type": "integer"}})");
  EXPECT_TRUE(accepts(*rest, "[]"));
  EXPECT_TRUE(accepts(*rest, R"(["x"])"));
  EXPECT_TRUE(accepts(*rest, R"(["x", 1, 2])"));
  EXPECT_EQ(accepted_prefix(*rest, "[1]"), 1u);
  EXPECT_EQ(accepted_prefix(*rest, R"(["x", "y"])"), 6u);
  // items false: nothing after the prefix.
  const auto closed = compiled(R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": false})");
  EXPECT_TRUE(accepts(*closed, "[true]"));
  EXPECT_TRUE(accepts(*closed, "[]"));
  EXPECT_EQ(accepted_prefix(*closed, "[true, false]"), 5u);
  // Draft 4's form: `items` as a list, then additionalItems.
  const auto draft4 = compiled(R"({"type": "array", "items": [{"type": "integer"}, {"type": "null"}],
      "additionalItems": {"type": "string"}})");
  EXPECT_TRUE(accepts(*draft4, R"([1, null, "a", "b"])"));
  EXPECT_EQ(accepted_prefix(*draft4, "[1, 2]"), 4u);
  EXPECT_EQ(accepted_prefix(*draft4, "[1, null, 3]"), 10u);
  EXPECT_EQ(
      accepted_prefix(*compiled(R"({"items": [{"type": "integer"}], "additionalItems": false})"), "[1, 2]"),
      2u);
  // A tuple nested in an object, as pydantic writes a model with a tuple field.
  const auto model = compiled(R"({"type": "object", "properties": {"point": {"type": "array",
      "prefixItems": [{"type": "number"}, {"type": "number"}], "minItems": 2, "maxItems": 2}},
      "required": ["point"]})");
  EXPECT_TRUE(accepts(*model, R"({"point": [1.5, -2]})"));
  EXPECT_FALSE(accepts(*model, R"({"point": [1.5]})"));
}

// A small validator of the supported keywords, independent of the recogniser (for the random walks).
bool valid(const ojson& v, const ojson& schema, const ojson& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    return valid(v, root.at(ojson::json_pointer(ref.substr(1))), root);
  }
  if (schema.contains("const")) return v == schema["const"];
  if (schema.contains("enum")) {
    for (const ojson& e : schema["enum"])
      if (e == v) return true;
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    int matches = 0;
    for (const ojson& b : schema[key]) matches += valid(v, b, root);
    return key[0] == 'a' ? matches > 0 : matches == 1;
  }
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_string())
      types.push_back(schema["type"]);
    else
      for (const ojson& t : schema["type"]) types.push_back(t);
    if (schema.value("nullable", false)) types.push_back("null");
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
           (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
           (t == "integer" && (v.is_number_integer() ||
                               (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    const ojson props = schema.value("properties", ojson::object());
    for (const auto& [k, sub] : v.items()) {
      if (props.contains(k)) {
        if (!valid(sub, props[k], root)) return false;
      } else if (!valid(sub, schema.value("additionalProperties", ojson(true)), root)) {
        return false;
      }
    }
    for (const ojson& r : schema.value("required", ojson::array()))
      if (!v.contains(r.get<std::string>())) return false;
    if (v.size() < schema.value("minProperties", 0u) || v.size() > schema.value("maxProperties", 1000000u))
      return false;
  }
  if (v.is_number() && schema.contains("multipleOf") &&
      (v.is_number_integer() ? v.get<int64_t>() % schema["multipleOf"].get<int64_t>() != 0
                             : std::fmod(v.get<double>(), schema["multipleOf"].get<double>()) != 0.0))
    return false;
  if (v.is_number()) {
    const double x = v.get<double>();
    if ((schema.contains("minimum") && x < schema["minimum"].get<double>()) ||
        (schema.contains("maximum") && x > schema["maximum"].get<double>()) ||
        (schema.contains("exclusiveMinimum") && x <= schema["exclusiveMinimum"].get<double>()) ||
        (schema.contains("exclusiveMaximum") && x >= schema["exclusiveMaximum"].get<double>()))
      return false;
  }
  if (v.is_string() && schema.contains("pattern") &&
      !std::regex_search(v.get<std::string>(), std::regex(schema["pattern"].get<std::string>())))
    return false;
  if (v.is_string()) {
    size_t chars = 0;
    for (char c : v.get<std::string>()) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    if (chars < schema.value("minLength", 0u) || chars > schema.value("maxLength", 1000000u)) return false;
  }
  if (v.is_array()) {
    if (v.size() < schema.value("minItems", 0u) || v.size() > schema.value("maxItems", 1000000u))
      return false;
    // A tuple's first items follow prefixItems (or `items` as a list), the others `items` (additionalItems).
    const bool listed = schema.contains("items") && schema["items"].is_array();
    const ojson prefix = schema.contains("prefixItems") ? schema["prefixItems"]
                         : listed                       ? schema["items"]
                                                        : ojson::array();
    const ojson rest =
        listed ? schema.value("additionalItems", ojson(true)) : schema.value("items", ojson(true));
    for (size_t i = 0; i < v.size(); ++i)
      if (!valid(v[i], i < prefix.size() ? prefix[i] : rest, root)) return false;
  }
  return true;
}

// Random walks over the bytes the recogniser takes (structure favoured over long strings and numbers):
// every state takes some byte or is complete, and every completed document validates.
// Returns how many walks completed a document.
int walk(const ojson& schema, const JsonSchema& compiled_schema, int walks, uint32_t seed) {
  const JsonSchema* s = &compiled_schema;
  const std::string schema_text = schema.dump();
  std::mt19937 rng(seed);
  int completed = 0;
  for (int w = 0; w < walks; ++w) {
    JsonSchemaRecognizer r(s);
    std::string text;
    for (int step = 0; step < 3000; ++step) {
      if (r.complete() && (rng() % 4 == 0)) break;
      std::vector<uint8_t> bytes;
      for (int b = 0; b < 256; ++b) {
        JsonSchemaRecognizer next = r;
        if (next.feed(static_cast<uint8_t>(b))) bytes.push_back(static_cast<uint8_t>(b));
      }
      if (bytes.empty()) {
        EXPECT_TRUE(r.complete()) << "dead end after " << text << "\n" << schema_text;
        break;
      }
      if (!text.empty() && text.back() == '\\' && bytes.size() > 1)  // no \u: lone surrogates would not parse
        bytes.erase(std::remove(bytes.begin(), bytes.end(), static_cast<uint8_t>('u')), bytes.end());
      // Prefer punctuation and quotes (to close strings), then anything; numbers stay short (nlohmann's
      // parser holds doubles: 1e999 would not parse).
      const size_t last_other = text.find_last_not_of("0123456789eE+-.");
      const bool long_number =
          text.size() >= 3 && (last_other == std::string::npos || last_other < text.size() - 3);
      if (long_number) {
        std::vector<uint8_t> other;
        for (uint8_t b : bytes)
          if (std::string_view("0123456789eE+-.").find(static_cast<char>(b)) == std::string_view::npos)
            other.push_back(b);
        if (other.empty() && r.complete()) break;  // a number at the top: end it here
        if (!other.empty()) bytes = other;
      }
      std::vector<uint8_t> structural;
      for (uint8_t b : bytes)
        if (std::string_view("{}[],:\"tfn0123456789").find(static_cast<char>(b)) != std::string_view::npos)
          structural.push_back(b);
      const bool pick_structural = !structural.empty() && rng() % 5 != 0;
      const std::vector<uint8_t>& from = pick_structural ? structural : bytes;
      const uint8_t b = from[rng() % from.size()];
      EXPECT_TRUE(r.feed(b));
      text += static_cast<char>(b);
    }
    if (!r.complete()) continue;
    ++completed;
    if (!ojson::accept(text)) {
      ADD_FAILURE() << "not JSON: " << text;
      continue;
    }
    EXPECT_TRUE(valid(ojson::parse(text), schema, schema)) << schema_text << "\n" << text;
  }
  return completed;
}

void walk_randomly(const std::string& schema_text, int walks, int expect_completed) {
  const ojson schema = ojson::parse(schema_text);
  EXPECT_GE(walk(schema, *JsonSchema::compile(schema), walks, 1234), expect_completed) << schema_text;
}

TEST(JsonSchemaRecognizer, RandomWalksNeverDeadEndAndValidate) {
  walk_randomly(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
      "kind": {"enum": ["a", "ab", 1, 10]}, "code": {"type": "string", "minLength": 2, "maxLength": 5},
      "score": {"type": "integer", "minimum": -30, "maximum": 1200},
      "sku": {"type": "string", "pattern": "^[A-Z]{2}(-\\d{2,3})+$"}, "tag": {"type": "string", "pattern": "x+"}, "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
      "list": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4}},
      "required": ["name", "kind", "list", "sku"]})",
                200, 100);
  walk_randomly(R"({"type": "object", "additionalProperties": {"type": "array", "items": {}}})", 200, 100);
  walk_randomly(R"({"type": "object", "additionalProperties": {"type": "object", "additionalProperties":
      {"type": "integer"}, "minProperties": 1}, "minProperties": 2, "maxProperties": 3})",
                200, 100);
  walk_randomly(R"({"type": "array", "items": {"anyOf": [{"type": "number", "exclusiveMinimum": -0.5,
      "maximum": 0.375}, {"type": "null"}]}, "minItems": 3})",
                200, 100);
  walk_randomly(R"({"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 0.26})", 200, 100);
  walk_randomly(R"({"type": "array", "items": {"type": "integer", "multipleOf": 15, "minimum": -40,
      "maximum": 1000}, "minItems": 4})",
                200, 100);
  walk_randomly(R"({"type": "array", "prefixItems": [{"type": "integer", "minimum": 3, "maximum": 40},
      {"enum": ["a", "b"]}, {"type": "array", "prefixItems": [{"type": "boolean"}], "items": false}],
      "items": {"type": "string", "maxLength": 3}, "minItems": 2})",
                200, 100);
  // Recursion with a way out: deep walks must close before the depth limit.
  walk_randomly(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}, "minItems": 1}, {"type": "null"}]})",
                200, 100);
  walk_randomly(R"({"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
      "items": {"$ref": "#"}}}, "required": ["v", "kids"]})",
                200, 100);
}

// Random schemas from the supported keywords (and some of what is refused): each one compiles or is refused
// with an Error, and random walks over every compiled one never dead-end and validate.
ojson random_literal(std::mt19937& rng) {
  switch (rng() % 6) {
    case 0:
      return ojson(str_cat("v", rng() % 5));
    case 1:
      return ojson(static_cast<int>(rng() % 21) - 10);
    case 2:
      return ojson(nullptr);
    case 3:
      return ojson(rng() % 2 == 0);
    case 4:
      return ojson::array({static_cast<int>(rng() % 3), "x"});
    default:
      return ojson(0.5 * static_cast<double>(rng() % 7));
  }
}

ojson random_schema(std::mt19937& rng, int depth) {
  const char* scalars[] = {"string", "integer", "number", "boolean", "null"};
  const uint32_t pick = rng() % (depth > 0 ? 16 : 8);
  ojson s = ojson::object();
  switch (pick) {
    case 0:
      s["type"] = "string";
      if (rng() % 2) s["minLength"] = rng() % 3;
      if (rng() % 2) s["maxLength"] = 2 + rng() % 4;
      break;
    case 1:
    case 2:
    case 3:
    case 4:
      s["type"] = scalars[pick];
      if (pick == 1 && rng() % 2) s["minimum"] = static_cast<int>(rng() % 50) - 20;
      if (pick == 1 && rng() % 2) s["exclusiveMaximum"] = 40 + static_cast<int>(rng() % 80);
      if (pick == 1 && rng() % 3 == 0) s["multipleOf"] = 1 + rng() % 12;
      if (pick == 2 && rng() % 2)
        s[rng() % 2 ? "minimum" : "exclusiveMinimum"] = 0.25 * static_cast<double>(rng() % 17) - 2;
      if (pick == 2 && rng() % 2)
        s[rng() % 2 ? "maximum" : "exclusiveMaximum"] = 0.125 * static_cast<double>(rng() % 41) - 1;
      break;
    case 5: {
      ojson values = ojson::array();
      for (uint32_t i = 0, n = 1 + rng() % 4; i < n; ++i) values.push_back(random_literal(rng));
      s["enum"] = values;
      break;
    }
    case 6:
      s["const"] = random_literal(rng);
      break;
    case 7:
      s["type"] = ojson::array({scalars[rng() % 5], scalars[rng() % 5]});
      break;
    case 8:
    case 9: {
      s["type"] = "object";
      ojson props = ojson::object();
      ojson required = ojson::array();
      for (uint32_t i = 0, n = rng() % 4; i < n; ++i) {
        const std::string name = str_cat("p", i);
        props[name] = random_schema(rng, depth - 1);
        if (rng() % 2) required.push_back(name);
      }
      if (rng() % 2) {  // a discriminator (unions of such objects compile when their values differ)
        props["kind"] = {{"const", str_cat("k", rng() % 6)}};
        required.push_back("kind");
      }
      if (!props.empty() || rng() % 2) s["properties"] = props;
      if (!required.empty()) s["required"] = required;
      if (props.empty() && rng() % 2) {
        s["additionalProperties"] = random_schema(rng, depth - 1);
        if (rng() % 2) s["minProperties"] = rng() % 3;
        if (rng() % 2) s["maxProperties"] = 1 + rng() % 3;
      } else if (rng() % 3 == 0)
        s["additionalProperties"] = false;
      break;
    }
    case 10:
    case 11:
      s["type"] = "array";
      if (rng() % 3 == 0) {  // a tuple: prefixItems or draft 4's list, then items or nothing
        ojson prefix = ojson::array();
        for (uint32_t i = 0, n = 1 + rng() % 3; i < n; ++i) prefix.push_back(random_schema(rng, depth - 1));
        const bool draft4 = rng() % 2;
        s[draft4 ? "items" : "prefixItems"] = prefix;
        const char* rest = draft4 ? "additionalItems" : "items";
        if (rng() % 2) s[rest] = rng() % 2 ? ojson(false) : random_schema(rng, depth - 1);
      } else {
        s["items"] = random_schema(rng, depth - 1);
      }
      if (rng() % 2) s["minItems"] = rng() % 3;
      if (rng() % 2) s["maxItems"] = 1 + rng() % 3;
      break;
    case 12:
    case 13: {
      ojson branches = ojson::array();
      for (uint32_t i = 0, n = 2 + rng() % 2; i < n; ++i) branches.push_back(random_schema(rng, depth - 1));
      s[pick == 12 ? "anyOf" : "oneOf"] = branches;
      break;
    }
    case 14:
      s["$ref"] = "#/$defs/node";
      break;
    default:
      if (rng() % 2) s["nullable"] = true, s["type"] = "integer";
      break;  // {}: any value
  }
  if (rng() % 8 == 0) s["description"] = "annotation";
  return s;
}

TEST(JsonSchemaRecognizer, RandomSchemasCompileOrRefuseAndTheirWalksValidate) {
  std::mt19937 rng(99);
  int compiled_count = 0, refused = 0, completed = 0;
  for (int i = 0; i < 400; ++i) {
    ojson schema = random_schema(rng, 3);
    ojson node = random_schema(rng, 2);
    node["type"] = "object";
    node["properties"]["next"] = {{"$ref", "#/$defs/node"}};  // recursion through an optional property
    schema["$defs"]["node"] = node;
    std::shared_ptr<const JsonSchema> s;
    try {
      s = JsonSchema::compile(schema);
    } catch (const Error&) {
      ++refused;
      continue;
    }
    ++compiled_count;
    completed += walk(schema, *s, 8, static_cast<uint32_t>(i));
  }
  std::printf("random schemas: %d compiled, %d refused, %d walks completed\n", compiled_count, refused,
              completed);
  EXPECT_GT(compiled_count, 200);
  EXPECT_GT(refused, 0);  // overlapping oneOf, two object branches, enum values of the wrong type...
  EXPECT_GT(completed, 1000);
}

// pydantic's discriminated union: oneOf of objects told apart by a const property, written first.
const char* kPets = R"({"$defs": {
    "Cat": {"properties": {"name": {"type": "string"}, "pet_type": {"const": "cat"}, "meows": {"type": "integer"}},
            "required": ["pet_type", "meows"], "type": "object"},
    "Dog": {"properties": {"pet_type": {"const": "dog"}, "barks": {"type": "number"}},
            "required": ["pet_type", "barks"], "type": "object", "additionalProperties": false}},
  "properties": {"pet": {"discriminator": {"propertyName": "pet_type"},
                         "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
                 "owners": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}}},
  "required": ["pet"], "type": "object"})";

TEST(JsonSchemaRecognizer, ObjectUnionsFollowTheirDiscriminator) {
  const auto s = compiled(kPets);
  EXPECT_TRUE(accepts(*s, R"({"pet": {"pet_type": "cat", "meows": 3}})"));
  EXPECT_TRUE(accepts(*s, R"({"pet": {"pet_type": "cat", "name": "Tom", "meows": 3}})"));
  EXPECT_TRUE(accepts(*s, R"({"pet": {"pet_type": "dog", "barks": 1.5}, "owners": [{"pet_type": "dog",
      "barks": 2}, {"pet_type": "cat", "meows": 0}]})"));
  EXPECT_EQ(accepted_prefix(*s, R"({"pet": {"meows": 3}})"), 10u);  // the discriminator comes first
  EXPECT_EQ(accepted_prefix(*s, R"({"pet": {"pet_type": "cow"}})"), 23u);
  EXPECT_EQ(accepted_prefix(*s, R"({"pet": {"pet_type": "cat", "barks": 1}})"), 29u);  // a dog's key
  EXPECT_EQ(accepted_prefix(*s, R"({"pet": {"pet_type": "dog"}})"), 26u);              // barks is required
  walk_randomly(kPets, 200, 100);
  // Objects without a discriminator cannot be told apart at their first byte: refused.
  EXPECT_NE(compile_error(R"({"anyOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]},
      {"properties": {"a": {"const": 1}, "b": {}}, "required": ["a"]}]})")
                .find("needs a discriminator"),
            std::string::npos);
}

TEST(JsonSchemaRecognizer, DepthLimitLeavesAWayOut) {
  const auto s = compiled(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}}, {"type": "integer"}]})");
  JsonSchemaRecognizer r(s.get());
  for (int i = 0; i < JsonSchema::kMaxDepth; ++i) ASSERT_TRUE(r.feed(static_cast<uint8_t>('['))) << i;
  EXPECT_FALSE(r.feed(static_cast<uint8_t>('[')));  // one more level would not fit
  EXPECT_TRUE(r.feed(static_cast<uint8_t>('1')));
  // A required nested object needs two levels: at depth 31 its array can open only empty.
  const auto t = compiled(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}},
      {"type": "object", "properties": {"o": {"type": "object"}}, "required": ["o"]}]})");
  JsonSchemaRecognizer q(t.get());
  for (int i = 0; i < JsonSchema::kMaxDepth - 1; ++i) ASSERT_TRUE(q.feed(static_cast<uint8_t>('[')));
  EXPECT_FALSE(q.feed(static_cast<uint8_t>('{')));
  EXPECT_TRUE(q.feed(static_cast<uint8_t>(']')));
}

TEST(JsonSchemaRecognizer, StatesCompareAndRefusalsLeaveTheStateAlone) {
  const auto s = compiled(R"({"type": "object", "properties": {"a": {"type": "string"}}})");
  JsonSchemaRecognizer x(s.get()), y(s.get());
  ASSERT_TRUE(x.feed(std::string_view("{\"a\": \"hello")));
  ASSERT_TRUE(y.feed(std::string_view("{\"a\":\"h")));
  EXPECT_TRUE(x.in_plain_string());
  EXPECT_TRUE(x == y);  // string content and whitespace already ended are not state
  const JsonSchemaRecognizer before = x;
  EXPECT_FALSE(x.feed(static_cast<uint8_t>(0x01)));
  EXPECT_TRUE(x == before);
}

// Every non-added token checked on its own from `state` (what the trie's mask must equal).
std::vector<uint32_t> brute_force_mask(const Tokenizer& tok, const JsonSchemaRecognizer& state,
                                       size_t words) {
  const std::vector<int32_t> added = tok.added_token_ids();
  std::vector<uint32_t> mask(words, 0u);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.has_id(id) || std::find(added.begin(), added.end(), id) != added.end()) continue;
    JsonSchemaRecognizer next = state;
    if (!tok.token_bytes(id).empty() && next.feed(tok.token_bytes(id))) mask[id / 32] |= 1u << (id % 32);
  }
  return mask;
}

// The masks over DeepSeek-V3's vocabulary equal checking each token on its own from the same state, along a
// document that passes keys, literals, numbers, strings (with escapes) and nested containers.
TEST(JsonSchemaMasks, EqualCheckingEveryToken) {
  const Tokenizer tok = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  const TokenTrie trie(tok);
  const int32_t vocab = 129280;
  const auto s = compiled(R"({"type": "object", "properties": {"title": {"type": "string", "maxLength": 12},
      "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
      "genre": {"enum": ["drama", "documentary", "comedy"]}, "cast": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
      "lead": {"type": "boolean"}}, "required": ["name"]}}, "rating": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 10},
      {"type": "null"}]}}, "required": ["title", "year", "genre"]})");
  const std::string doc =
      "{\"title\": \"Das \\\"Boot\\\" \u00e9\", \"year\": 1981, \"genre\": \"drama\", "
      "\"cast\": [{\"name\": \"J\u00fcrgen\", \"lead\": true}], \"rating\": 8.4}";
  JsonSchemaRecognizer state(s.get());
  for (size_t i = 0; i <= doc.size(); ++i) {
    const size_t year = doc.find("1981");
    if (i % 5 == 0 || i == doc.size() || (i > 10 && i < 30) ||
        (i >= year && i <= year + 5)) {  // bounded values
      std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);
      trie.allowed(state, mask);
      ASSERT_EQ(mask, brute_force_mask(tok, state, mask.size())) << "after " << doc.substr(0, i);
    }
    if (i < doc.size()) {
      ASSERT_TRUE(state.feed(static_cast<uint8_t>(doc[i]))) << doc.substr(0, i + 1);
    }
  }
  EXPECT_TRUE(state.complete());
  // A pattern string: the trie is walked through the DFA.
  for (const auto& [regex, prefix] :
       std::vector<std::pair<std::string, std::string>>{{"^[A-Z]{2}(-\\\\d{2,3})+$", "\""},
                                                        {"^[A-Z]{2}(-\\\\d{2,3})+$", "\"AB"},
                                                        {"^[A-Z]{2}(-\\\\d{2,3})+$", "\"AB-1"},
                                                        {"^[A-Z]{2}(-\\\\d{2,3})+$", "\"AB-12"},
                                                        {"^.+$", "\"AB"},    // the DFA takes anything
                                                        {"x+", "\"ab"},      // not yet
                                                        {"x+", "\"axb"}}) {  // from here on anything
    const auto pattern = compiled(str_cat(R"({"type": "string", "pattern": ")", regex, "\"}"));
    JsonSchemaRecognizer in_string(pattern.get());
    ASSERT_TRUE(in_string.feed(std::string_view(prefix)));
    std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);
    trie.allowed(in_string, mask);
    EXPECT_EQ(mask, brute_force_mask(tok, in_string, mask.size())) << regex << " after " << prefix;
  }
  // Bounded strings with every kind of budget: a precomputed set, a filtered one, all safe tokens.
  for (int max_length : {2, 3, 47, 48, 60, 100, 150, 1000}) {
    const auto bounded = compiled(str_cat(R"({"type": "string", "maxLength": )", max_length, "}"));
    JsonSchemaRecognizer in_string(bounded.get());
    ASSERT_TRUE(in_string.feed(std::string_view("\"ab")));
    std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);
    trie.allowed(in_string, mask);
    EXPECT_EQ(mask, brute_force_mask(tok, in_string, mask.size())) << "maxLength " << max_length;
  }
}

// Sampling inside the masks (random logits, DeepSeek-V3's vocabulary, through JsonConstraint): every answer
// that ends with EOS validates, and EOS is offered exactly when the value is complete (a number: also more).
TEST(JsonSchemaMasks, SampledAnswersValidate) {
  const Tokenizer tok = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  const auto trie = std::make_shared<const TokenTrie>(tok);
  const int32_t vocab = 129280;
  const int32_t eos = *tok.eos_id();
  const std::string text = R"({"type": "object", "properties": {"id": {"type": "integer"},
      "level": {"enum": ["low", "high"]}, "notes": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
      "required": ["id", "level"]})";
  const ojson schema = ojson::parse(text);
  const auto s = JsonSchema::compile(schema);
  std::mt19937 rng(7);
  int ended = 0;
  for (int run = 0; run < 12; ++run) {
    JsonConstraint c(trie, tok, vocab, {eos}, s);
    std::string out;
    for (int step = 0; step < 80; ++step) {
      const std::span<const uint32_t> m = c.allowed();
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < vocab; ++id)
        if ((m[id / 32] >> (id % 32)) & 1u) ids.push_back(id);
      ASSERT_FALSE(ids.empty()) << "no token allowed after " << out;
      const bool eos_allowed = std::find(ids.begin(), ids.end(), eos) != ids.end();
      EXPECT_EQ(eos_allowed, c.complete()) << out;
      // Short tokens and EOS favoured, so that answers end within the budget.
      int32_t pick = ids[rng() % ids.size()];
      if (eos_allowed && rng() % 2 == 0) pick = eos;
      for (int tries = 0; tries < 8 && tok.token_bytes(pick).size() > 2 && pick != eos; ++tries)
        pick = ids[rng() % ids.size()];
      c.advance(pick);
      if (pick == eos) {
        ++ended;
        EXPECT_TRUE(valid(ojson::parse(out), schema, schema)) << out;
        break;
      }
      out += tok.token_bytes(pick);
    }
  }
  EXPECT_GT(ended, 3);
}

// The cost of schema masks on DeepSeek-V3's vocabulary (a measurement, not a check):
//   build/tests/json_schema_test --gtest_also_run_disabled_tests --gtest_filter='*SchemaMaskCost*'
TEST(JsonSchemaBench, DISABLED_SchemaMaskCost) {
  const Tokenizer v3 = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  const TokenTrie trie(v3);
  const int32_t vocab = 129280;
  const auto schema =
      compiled(R"({"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
      "year": {"type": "integer"}, "genre": {"enum": ["drama", "documentary", "comedy"]},
      "tags": {"type": "array", "items": {}}}, "required": ["title", "year", "genre"]})");
  for (const char* prefix :
       {"", "{", "{\"ti", "{\"title\": ", "{\"title\": \"Das B", "{\"title\": \"x\", \"year\": 19",
        "{\"title\": \"x\", \"year\": 1, \"genre\": \"d",
        "{\"title\": \"x\", \"year\": 1, \"genre\": \"drama\", \"tags\": [1, "}) {
    JsonSchemaRecognizer state(schema.get());
    ASSERT_TRUE(state.feed(std::string_view(prefix))) << prefix;
    print_mask_cost(trie, state, vocab, prefix);
  }
  // Pattern strings walk the trie through their DFA: a narrow pattern and one that takes almost anything.
  for (const char* pattern : {R"("^[A-Z]{2}-\\d+$")", R"("^.+$")"}) {
    const auto p = compiled(str_cat(R"({"type": "string", "pattern": )", pattern, "}"));
    JsonSchemaRecognizer state(p.get());
    ASSERT_TRUE(state.feed(std::string_view("\"AB")));
    print_mask_cost(trie, state, vocab, str_cat("\"AB with pattern ", pattern).c_str());
  }
}

// The cost of compiling schemas (a measurement, not a check): a pydantic-style model and a large synthetic
// schema (100 properties, a third of them enums of 250 values).
//   build/tests/json_schema_test --gtest_also_run_disabled_tests --gtest_filter='*SchemaCompileCost*'
TEST(JsonSchemaBench, DISABLED_SchemaCompileCost) {
  const ojson movie = ojson::parse(R"({"$defs": {"Genre": {"enum": ["drama", "comedy", "documentary",
      "thriller"], "title": "Genre", "type": "string"}, "Person": {"properties": {"name": {"title": "Name",
      "type": "string", "maxLength": 80}, "born": {"anyOf": [{"type": "integer", "minimum": 1850, "maximum":
      2025}, {"type": "null"}], "default": null}}, "required": ["name"], "title": "Person", "type": "object"}},
      "properties": {"title": {"title": "Title", "type": "string"}, "year": {"title": "Year", "type":
      "integer", "minimum": 1888}, "genre": {"$ref": "#/$defs/Genre"}, "cast": {"items": {"$ref":
      "#/$defs/Person"}, "title": "Cast", "type": "array", "maxItems": 20}, "rating": {"type": "number",
      "minimum": 0, "maximum": 10}, "tags": {"items": {"type": "string"}, "type": "array"}, "awards":
      {"additionalProperties": {"type": "integer"}, "type": "object"}}, "required": ["title", "year",
      "genre", "cast"], "title": "Movie", "type": "object"})");
  ojson large = {{"type", "object"}};
  ojson countries = ojson::array();
  for (int i = 0; i < 250; ++i) countries.push_back(str_cat("Country number ", i));
  for (int i = 0; i < 100; ++i) {
    large["properties"][str_cat("field_", i)] =
        i % 3 == 0   ? ojson{{"type", "string"}, {"maxLength", 80}}
        : i % 3 == 1 ? ojson{{"enum", countries}}
                     : ojson{{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}};
  }
  using Clock = std::chrono::steady_clock;
  for (const auto& [name, schema] : {std::pair{"movie", movie}, std::pair{"large", large}}) {
    const int n = std::string(name) == "movie" ? 2000 : 20;
    const auto a = Clock::now();
    for (int i = 0; i < n; ++i) JsonSchema::compile(schema);
    const auto b = Clock::now();
    for (int i = 0; i < n; ++i) JsonSchema::compile_cached(schema);
    const auto c = Clock::now();
    std::printf("%s (%zu bytes): compile %.4f ms, through the cache %.4f ms\n", name, schema.dump().size(),
                std::chrono::duration<double, std::milli>(b - a).count() / n,
                std::chrono::duration<double, std::milli>(c - b).count() / n);
  }
}

}  // namespace
}  // namespace dsinfer
