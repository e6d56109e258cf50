// JSON-constrained decoding: JsonRecognizer against JSON's grammar (valid documents accepted byte by byte,
// invalid ones refused at the first wrong byte, nlohmann's parser agreeing with every complete document),
// TokenTrie masks equal to checking every token on its own (the tiny model's and DeepSeek-V3's vocabularies),
// and JsonConstraint's end-of-sequence and advance rules.
#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/json_recognizer.h"
#include "engine/json_schema.h"
#include "engine/request_state.h"
#include "mask_cost.h"

namespace dsinfer {
namespace {

// The length of the longest prefix of text the recogniser accepts.
size_t accepted_prefix(const std::string& text, bool object_only = true) {
  JsonRecognizer r(object_only);
  for (size_t i = 0; i < text.size(); ++i)
    if (!r.feed(static_cast<uint8_t>(text[i]))) return i;
  return text.size();
}

bool complete_document(const std::string& text, bool object_only = true) {
  JsonRecognizer r(object_only);
  return r.feed(text) && r.complete();
}

TEST(JsonRecognizer, AcceptsDocuments) {
  for (const std::string doc :
       {R"({})", R"({"a": 1})", R"( { "a" : [1, 2.5, -0.0, 1e10, -3E-2, 0.25e+7] , "b":{"c":null}})",
        R"({"t": true, "f": false, "n": null, "s": "x\"y\\z\/\b\f\n\r\t\u00e9\uD83D\uDE00"})",
        "{\"utf8\": \"é中😀\"}", R"({"nested": [[[{"x": []}]], {}]})", "{\n  \"pretty\": [\n    1\n  ]\n}",
        R"({"": ""})", R"({"a": [], "b": {}, "c": [{}]})"}) {
    EXPECT_TRUE(complete_document(doc)) << doc;
    EXPECT_EQ(accepted_prefix(doc), doc.size()) << doc;
    EXPECT_TRUE(nlohmann::json::accept(doc)) << doc;  // the test's documents are JSON
  }
  // Any value at the top when object_only is off.
  for (const std::string doc : {"[1]", "\"s\"", "12", "-0.5", "true", "null"})
    EXPECT_TRUE(complete_document(doc, false)) << doc;
  EXPECT_FALSE(complete_document("12", true));
}

TEST(JsonRecognizer, RefusesAtTheFirstWrongByte) {
  struct Case {
    std::string text;
    size_t at;  // the first refused byte
  };
  const std::vector<Case> cases = {
      {"[1]", 0},                // the top must be an object
      {"{a", 1},                 // keys are strings
      {"{\"a\" 1", 5},           // a colon after the key
      {"{\"a\": 01", 7},         // no leading zeros
      {"{\"a\": 1.}", 8},        // digits after the point
      {"{\"a\": .5}", 6},        // a digit before it
      {"{\"a\": +1}", 6},        // no plus sign
      {"{\"a\": 1e}", 8},        // exponent digits
      {"{\"a\": tru}", 9},       // literals in full
      {"{\"a\": nul1}", 9},      // literals exactly
      {"{\"a\": 1,}", 8},        // no trailing comma
      {"{\"a\": [1,]}", 9},      // nor in arrays
      {"{\"a\": 1]", 7},         // brackets match
      {"{\"a\": \"\x01\"}", 7},  // control characters are escaped
      {"{\"a\": \"\\x\"}", 8},   // known escapes only
      {"{\"a\": \"\\u12G4\"}", 11},
      {"{\"a\": \"\xC0\xAF\"}", 7},          // overlong UTF-8
      {"{\"a\": \"\xED\xA0\x80\"}", 8},      // a surrogate
      {"{\"a\": \"\xF4\x90\x80\x80\"}", 8},  // beyond U+10FFFF
      {"{\"a\": \"\xE4\xB8\"}", 9},          // a cut character
      {"{} ", 2},                            // nothing after the object
      {"{}{}", 2},
  };
  for (const Case& c : cases) EXPECT_EQ(accepted_prefix(c.text), c.at) << c.text;
}

TEST(JsonRecognizer, BoundsNestingAndWhitespace) {
  std::string deep = "{\"a\": ";
  for (int i = 1; i < JsonRecognizer::kMaxDepth; ++i) deep += "[";
  EXPECT_EQ(accepted_prefix(deep), deep.size());
  EXPECT_EQ(accepted_prefix(deep + "["), deep.size());
  const std::string spaces(JsonRecognizer::kMaxWhitespaceRun, ' ');
  EXPECT_EQ(accepted_prefix("{" + spaces + "}"), spaces.size() + 2);
  EXPECT_EQ(accepted_prefix("{" + spaces + " }"), spaces.size() + 1);
  // A run ends at any other byte; strings may hold any amount of spaces.
  EXPECT_TRUE(
      complete_document("{" + spaces + "\"a\"" + spaces + ":" + spaces + "\"" + spaces + spaces + "\"}"));
}

TEST(JsonRecognizer, FreeAfterTheValueWhenEmbedded) {
  JsonRecognizer embedded(true, true);
  EXPECT_TRUE(embedded.feed(std::string_view("{\"a\": [1]}\n```<anything>")));
  EXPECT_TRUE(embedded.complete());
  JsonRecognizer whole(true, false);
  EXPECT_FALSE(whole.feed(std::string_view("{\"a\": [1]}\n")));
}

TEST(JsonRecognizer, StatesCompareAndRefusalsLeaveTheStateAlone) {
  JsonRecognizer a, b;
  EXPECT_TRUE(a == b);
  ASSERT_TRUE(a.feed(std::string_view("{\"k\": \"v")));
  ASSERT_TRUE(b.feed(std::string_view("{\"k\": \"v")));
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(b.feed(static_cast<uint8_t>(0x01)));
  EXPECT_TRUE(a == b);  // unchanged by the refusal
  ASSERT_TRUE(b.feed(static_cast<uint8_t>('x')));
  EXPECT_TRUE(a == b);  // a string's content is not state: the same continuations
  ASSERT_TRUE(b.feed(static_cast<uint8_t>('"')));
  EXPECT_FALSE(a == b);
}

// Random JSON values (nlohmann), dumped compact and indented: accepted whole; and every byte string the
// recogniser calls a complete document parses.
nlohmann::json random_value(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 4 : 6);
  switch (kind(rng)) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng()) - (1ll << 31);
    case 3:
      return std::ldexp(static_cast<double>(rng()) / 4294967296.0 - 0.5, static_cast<int>(rng() % 40) - 20);
    case 4: {
      std::string s;
      const char* pieces[] = {"a", "\"", "\\", "\n", "é", "😀", "\x01", " ", "/", "\t"};
      for (int i = rng() % 6; i > 0; --i) s += pieces[rng() % 10];
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = rng() % 4; i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = rng() % 4; i > 0; --i) o["k" + std::to_string(rng() % 100)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonRecognizer, AgreesWithNlohmannOnRandomDocuments) {
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    nlohmann::json doc = nlohmann::json::object();
    doc["v"] = random_value(rng, 0);
    for (int indent : {-1, 2}) {
      const std::string text = doc.dump(indent);
      EXPECT_TRUE(complete_document(text)) << text;
    }
  }
  // Mutations: whatever the recogniser completes is JSON.
  const std::string alphabet = "{}[]\":,01-.eE+tfnrul \\\"ab\n";
  int completed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = "{";
    for (int n = rng() % 14; n > 0; --n) text += alphabet[rng() % alphabet.size()];
    if (rng() % 2) text += "}";
    if (complete_document(text)) {
      ++completed;
      EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    }
  }
  EXPECT_GT(completed, 20);  // the search did reach complete documents
}

// Every non-added token checked on its own from `state`.
std::vector<uint32_t> brute_force_mask(const Tokenizer& tok, const JsonRecognizer& state, int32_t vocab) {
  std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);
  const std::vector<int32_t> added = tok.added_token_ids();
  for (int32_t id = 0; id < tok.vocab_size() && id < vocab; ++id) {
    if (!tok.has_id(id) || std::find(added.begin(), added.end(), id) != added.end()) continue;
    const std::string& bytes = tok.token_bytes(id);
    JsonRecognizer next = state;
    if (!bytes.empty() && next.feed(bytes)) mask[id / 32] |= 1u << (id % 32);
  }
  return mask;
}

void expect_masks_match(const Tokenizer& tok, const std::string& document, size_t stride) {
  const TokenTrie trie(tok);
  const int32_t vocab = tok.vocab_size() + 40;  // a padded model vocabulary: the extra ids stay off
  JsonRecognizer state;
  for (size_t i = 0; i <= document.size(); ++i) {
    if (i % stride == 0 || i == document.size()) {
      std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);
      trie.allowed(state, mask);
      EXPECT_EQ(mask, brute_force_mask(tok, state, vocab)) << "after " << document.substr(0, i);
    }
    if (i < document.size()) {
      ASSERT_TRUE(state.feed(static_cast<uint8_t>(document[i])));
    }
  }
}

const std::string kDocument =
    "{\"name\": \"tiny\", \"n\": [1, -2.5e3, 0], \"ok\": true, \"s\": \"é \\\"q\\\" \\u00e9\", \"o\": "
    "{\"x\": null}}";

TEST(TokenTrie, MasksEqualCheckingEveryToken) {
  const Tokenizer tiny = Tokenizer::load(std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code");
  expect_masks_match(tiny, kDocument, 1);
  const Tokenizer v3 = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  expect_masks_match(v3, kDocument, 9);
}

TEST(JsonConstraint, EndOfSequenceOnlyOnceComplete) {
  const Tokenizer tok = Tokenizer::load(std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code");
  const int32_t vocab = tok.vocab_size();
  const int32_t eos = *tok.eos_id();
  JsonConstraint c(std::make_shared<const TokenTrie>(tok), tok, vocab, {eos});
  auto allowed = [&](int32_t id) {
    const std::span<const uint32_t> m = c.allowed();
    return ((m[id / 32] >> (id % 32)) & 1u) != 0;
  };
  EXPECT_FALSE(allowed(eos));
  EXPECT_THROW(c.advance(eos), Error);
  const std::vector<int32_t> body = tok.encode("{\"a\": [1, 2]}");
  for (int32_t id : body) {
    ASSERT_TRUE(allowed(id)) << tok.decode({id});
    c.advance(id);
  }
  EXPECT_TRUE(c.complete());
  const std::span<const uint32_t> m = c.allowed();
  for (int32_t id = 0; id < vocab; ++id) EXPECT_EQ(((m[id / 32] >> (id % 32)) & 1u) != 0, id == eos) << id;
  c.advance(eos);  // allowed now
  // A token that does not continue the object is refused, and the state kept.
  JsonConstraint d(std::make_shared<const TokenTrie>(tok), tok, vocab, {eos});
  const int32_t letter = tok.encode("a")[0];
  EXPECT_THROW(d.advance(letter), Error);
  d.advance(tok.encode("{")[0]);
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

// The cost of the allowed-token masks on DeepSeek-V3's vocabulary (a measurement, not a check):
//   build/tests/json_constraint_test --gtest_also_run_disabled_tests --gtest_filter='*MaskCost*'
TEST(JsonConstraintBench, DISABLED_MaskCost) {
  const Tokenizer v3 = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const auto t0 = Clock::now();
  const TokenTrie trie(v3);
  std::printf("trie: %.1f ms to build, %zu nodes\n", ms(Clock::now() - t0), trie.num_nodes());
  const int32_t vocab = 129280;  // DeepSeek-V3's logits
  for (const char* prefix :
       {"", "{", "{\"key", "{\"key\": ", "{\"key\": \"text", "{\"key\": 12", "{\"k\": [1, "}) {
    JsonRecognizer state;
    ASSERT_TRUE(state.feed(std::string_view(prefix)));
    print_mask_cost(trie, state, vocab, prefix);
  }
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

const Tokenizer& v3_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3");
  return tok;
}

std::shared_ptr<const TokenTrie> v3_trie() {
  static const std::shared_ptr<const TokenTrie> trie = std::make_shared<const TokenTrie>(v3_tokenizer());
  return trie;
}

bool has_bit(std::span<const uint32_t> mask, int32_t id) {
  return ((mask[id / 32] >> (id % 32)) & 1u) != 0;
}

constexpr int32_t kV3Vocab = 129280;

// A DeepSeek-V3 answer with text, two calls and text between: the mask is on exactly while each call's
// arguments are written, and allows each of their tokens.
TEST(ToolArgumentsConstraint, OnlyTheArgumentsAreHeldToJson) {
  const Tokenizer& tok = v3_tokenizer();
  const std::string opening = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>";
  const std::string answer =
      "Let me check ```json\n[1]``` first." + opening +
      "get_weather\n```json\n{\"city\": \"Paris\", \"days\": [1, 2]}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const std::vector<int32_t> ids = tok.encode(answer);
  ToolArgumentsConstraint c(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kFree);
  std::string text, constrained;
  for (int32_t id : ids) {
    const std::span<const uint32_t> mask = c.allowed();
    if (!mask.empty()) {
      EXPECT_TRUE(has_bit(mask, id)) << "token " << tok.decode({id}) << " after " << text;
      constrained += tok.decode({id});
    }
    c.advance(id);
    text += tok.decode({id});
  }
  // The markdown block in the text is free (no call opened it); the arguments of both calls were held (the
  // tokens that close them carry the newline after them).
  EXPECT_EQ(constrained, "{\"city\": \"Paris\", \"days\": [1, 2]}\n{}\n");
  EXPECT_TRUE(c.allowed().empty());
}

TEST(ToolArgumentsConstraint, StartsWhereThePromptLeftTheAnswer) {
  const Tokenizer& tok = v3_tokenizer();
  ToolArgumentsConstraint named(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kArguments);
  ASSERT_FALSE(named.allowed().empty());
  EXPECT_FALSE(has_bit(named.allowed(), tok.encode("hello")[0]));  // the object must open
  EXPECT_TRUE(has_bit(named.allowed(), tok.encode("{")[0]));
  ToolArgumentsConstraint required(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kInCall);
  EXPECT_TRUE(required.allowed().empty());  // the name is free
  for (int32_t id : tok.encode("get_time\n```json\n")) required.advance(id);
  EXPECT_TRUE(required.in_arguments());
  // A call closed without a fence frees the text.
  ToolArgumentsConstraint bare(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kInCall);
  for (int32_t id : tok.encode("f<｜tool▁call▁end｜>then ```json\n")) bare.advance(id);
  EXPECT_FALSE(bare.in_arguments());
}

// With the functions' parameter schemas: a call to get_weather is held to its schema (its keys, its enum),
// found by the name the model writes; a call to a function without one, to any object.
TEST(ToolArgumentsConstraint, CallsFollowTheirFunctionsSchema) {
  const Tokenizer& tok = v3_tokenizer();
  const auto weather = JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object", "properties":
      {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
      "additionalProperties": false})"),
                                           /*object_root=*/true);
  const ToolArgumentsConstraint::Schemas schemas = {{"get_weather", weather}};
  const std::string answer =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"zone\": 1}\n```<｜tool▁call▁end｜>";
  ToolArgumentsConstraint c(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kFree, schemas);
  std::string text;
  int bound_tokens = 0, free_object_tokens = 0;
  for (int32_t id : tok.encode(answer)) {
    const std::span<const uint32_t> mask = c.allowed();
    if (!mask.empty()) {
      EXPECT_TRUE(has_bit(mask, id)) << tok.decode({id}) << " after " << text;
      (c.schema_bound() ? bound_tokens : free_object_tokens) += 1;
      if (c.schema_bound() && text.size() > 0 && text.back() == '{') {
        // Right after get_weather's '{': only its first key (or whitespace) may follow, not another.
        EXPECT_FALSE(has_bit(mask, tok.encode("\"zone")[0]));
      }
    }
    c.advance(id);
    text += tok.decode({id});
  }
  EXPECT_GT(bound_tokens, 3);
  EXPECT_GT(free_object_tokens, 3);
  // A named function at the start: bound from the first token; an enum value outside the schema is refused.
  ToolArgumentsConstraint named(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kArguments, schemas,
                                "get_weather");
  EXPECT_TRUE(named.schema_bound());
  for (int32_t id : tok.encode("{\"city\": \"Oslo\", \"unit\": \"")) named.advance(id);
  EXPECT_TRUE(has_bit(named.allowed(), tok.encode("cel")[0]));
  EXPECT_FALSE(has_bit(named.allowed(), tok.encode("kel")[0]));
  // Required: the name comes from the answer itself.
  ToolArgumentsConstraint required(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kInCall,
                                   schemas);
  for (int32_t id : tok.encode("get_weather\n```json\n")) required.advance(id);
  EXPECT_TRUE(required.in_arguments());
  EXPECT_TRUE(required.schema_bound());
}

// DeepSeek-V3.1's bare layout: the arguments right after the separator, found by the name before it.
TEST(ToolArgumentsConstraint, BareLayoutHoldsTheArgumentsAfterTheSeparator) {
  const Tokenizer& tok = v3_tokenizer();
  const auto weather = JsonSchema::compile(
      nlohmann::ordered_json::parse(R"({"properties": {"city": {"type": "string"}}, "required": ["city"]})"),
      true);
  const std::string answer =
      "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>other<｜tool▁sep｜>{\"x\": [1]}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  ToolArgumentsConstraint c(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kFree,
                            {{"get_weather", weather}}, "", /*bare=*/true);
  std::string text, bound, free_object;
  for (int32_t id : tok.encode(answer)) {
    const std::span<const uint32_t> mask = c.allowed();
    if (!mask.empty()) {
      EXPECT_TRUE(has_bit(mask, id)) << tok.decode({id}) << " after " << text;
      (c.schema_bound() ? bound : free_object) += tok.decode({id});
    }
    c.advance(id);
    text += tok.decode({id});
  }
  EXPECT_EQ(bound, "{\"city\": \"Paris\"}");
  EXPECT_EQ(free_object, "{\"x\": [1]}");
  EXPECT_TRUE(c.allowed().empty());
  // A named function: the prompt ends at the separator.
  ToolArgumentsConstraint named(v3_trie(), tok, kV3Vocab, ToolArgumentsConstraint::Start::kArguments,
                                {{"get_weather", weather}}, "get_weather", true);
  EXPECT_TRUE(named.schema_bound());
  EXPECT_FALSE(has_bit(named.allowed(), tok.encode("hello")[0]));
}

// Through RequestState (the engine's per-request step): logits that favour text where the arguments go still
// give a JSON object.
TEST(ToolArgumentsConstraint, RequestStateSamplesInsideTheMask) {
  const Tokenizer& tok = v3_tokenizer();
  GenerationRequest request;
  request.prompt_ids = tok.encode("<｜User｜>weather?<｜Assistant｜>");
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 12;
  request.sampling.json_tool_arguments = true;
  request.sampling.tool_arguments_start = 2;  // a named function: at its arguments
  RequestState state(1, request, &tok, {*tok.eos_id()}, 4096, RequestState::Clock::now(), v3_trie(),
                     kV3Vocab);
  std::vector<float> logits(kV3Vocab, 0.0f);
  const int32_t hello = tok.encode(" hello")[0];
  const int32_t brace = tok.encode("{")[0];
  logits[hello] = 10.0f;  // the model's favourite, not JSON
  logits[brace] = 1.0f;
  const RequestEvent first = state.on_logits(logits.data(), kV3Vocab, 10, 0);
  ASSERT_EQ(first.token_ids.size(), 1u);
  EXPECT_EQ(first.token_ids[0], brace);
  // The sampling row carries the same mask for the backends.
  const SamplingRow row = state.sampling_row();
  ASSERT_FALSE(row.allowed.empty());
  EXPECT_FALSE(has_bit(row.allowed, hello));
  EXPECT_FALSE(has_bit(row.allowed, *tok.eos_id()));  // the arguments cannot end the answer
}

// RequestState passes the function's schema on: a key the schema lacks loses to one it has.
TEST(ToolArgumentsConstraint, RequestStateHoldsANamedCallToItsSchema) {
  const Tokenizer& tok = v3_tokenizer();
  GenerationRequest request;
  request.prompt_ids = tok.encode("<｜User｜>weather?<｜Assistant｜>");
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 12;
  request.sampling.json_tool_arguments = true;
  request.sampling.tool_arguments_start = 2;
  request.sampling.tool_arguments_function = "get_weather";
  request.sampling.tool_schemas = {
      {"get_weather",
       JsonSchema::compile(nlohmann::ordered_json::parse(
                               R"({"properties": {"city": {"type": "string"}}, "required": ["city"]})"),
                           true)}};
  RequestState state(1, request, &tok, {*tok.eos_id()}, 4096, RequestState::Clock::now(), v3_trie(),
                     kV3Vocab);
  std::vector<float> logits(kV3Vocab, 0.0f);
  const int32_t brace = tok.encode("{")[0];
  logits[brace] = 10.0f;
  ASSERT_EQ(state.on_logits(logits.data(), kV3Vocab, 10, 0).token_ids.at(0), brace);
  const int32_t quote = tok.encode("\"")[0];
  logits[quote] = 20.0f;
  ASSERT_EQ(state.on_logits(logits.data(), kV3Vocab, 11, 0).token_ids.at(0), quote);
  const int32_t zone = tok.encode("zone")[0];
  const int32_t city = tok.encode("city")[0];
  ASSERT_NE(zone, city);
  logits.assign(kV3Vocab, 0.0f);
  logits[zone] = 10.0f;  // the model's favourite, not a parameter
  logits[city] = 1.0f;
  EXPECT_EQ(state.on_logits(logits.data(), kV3Vocab, 12, 0).token_ids.at(0), city);
}

}  // namespace
}  // namespace dsinfer
