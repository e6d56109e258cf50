// ToolCallParser: DeepSeek-V3 and V3.1 call layouts, text around and between calls, pieces of any size
// (the same result as the whole text), markers split across pieces, and the ends a generation can stop at.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsinfer::server {
namespace {

using namespace tool_markup;

std::string s(std::string_view v) {
  return std::string(v);
}

// A V3 call: "function" <sep> name, then the arguments fenced as JSON.
std::string v3_call(const std::string& name, const std::string& args) {
  return s(kCallBegin) + "function" + s(kSep) + name + "\n```json\n" + args + "\n```" + s(kCallEnd);
}

struct Parsed {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

Parsed parse_in_pieces(const std::string& text, size_t piece) {
  ToolCallParser p;
  Parsed out;
  auto take = [&](ToolParseOutput o) {
    out.content += o.content;
    for (auto& c : o.calls) out.calls.push_back(c);
  };
  for (size_t at = 0; at < text.size(); at += piece) take(p.feed(std::string_view(text).substr(at, piece)));
  take(p.finish());
  return out;
}

void expect_call(const ParsedToolCall& c, const std::string& name, const std::string& args,
                 bool complete = true) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(c.arguments, args);
  EXPECT_EQ(c.complete, complete);
}

// Whole, then in pieces of every size from one byte (which splits the markers' UTF-8 too): the same result.
Parsed parse_every_way(const std::string& text) {
  const Parsed whole = parse_in_pieces(text, text.size() + 1);
  for (size_t piece = 1; piece <= 40; ++piece) {
    const Parsed split = parse_in_pieces(text, piece);
    EXPECT_EQ(split.content, whole.content) << "piece " << piece;
    EXPECT_EQ(split.calls.size(), whole.calls.size()) << "piece " << piece;
    for (size_t i = 0; i < split.calls.size() && i < whole.calls.size(); ++i) {
      EXPECT_EQ(split.calls[i].name, whole.calls[i].name) << "piece " << piece;
      EXPECT_EQ(split.calls[i].arguments, whole.calls[i].arguments) << "piece " << piece;
    }
  }
  return whole;
}

TEST(ToolCallParser, V3CallsAfterText) {
  const std::string text = "Let me look that up." + s(kCallsBegin) +
                           v3_call("get_weather", R"({"city": "Paris"})") + "\n" +
                           v3_call("get_time", R"({"zone": "CET"})") + s(kCallsEnd);
  const Parsed p = parse_every_way(text);
  EXPECT_EQ(p.content, "Let me look that up.");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", R"({"city": "Paris"})");
  expect_call(p.calls[1], "get_time", R"({"zone": "CET"})");
}

TEST(ToolCallParser, V31Layout) {
  const std::string text = s(kCallsBegin) + s(kCallBegin) + "search" + s(kSep) + R"({"q": "x"})" +
                           s(kCallEnd) + s(kCallBegin) + "fetch" + s(kSep) + R"({"url": "u"})" + s(kCallEnd) +
                           s(kCallsEnd);
  const Parsed p = parse_every_way(text);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "search", R"({"q": "x"})");
  expect_call(p.calls[1], "fetch", R"({"url": "u"})");
}

TEST(ToolCallParser, TextWithoutCallsPassesThroughWhole) {
  // Text that looks like the start of a marker is held only until it is known not to be one.
  for (const std::string& text : {std::string("plain answer"), std::string("a <| b <｜tool c <｜tool▁call"),
                                  std::string("ends with <｜tool▁calls")}) {
    const Parsed p = parse_every_way(text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
  }
  ToolCallParser held;
  EXPECT_EQ(held.feed("x <｜tool").content, "x ");  // could be a marker: held back
  EXPECT_EQ(held.feed("box").content, "<｜toolbox");
  EXPECT_FALSE(held.made_calls());
}

TEST(ToolCallParser, CallsArriveAsTheirEndMarkerDoes) {
  ToolCallParser p;
  EXPECT_TRUE(p.feed("Sure." + s(kCallsBegin)).content == "Sure.");
  ToolParseOutput o = p.feed(s(kCallBegin) + "function" + s(kSep) + "f\n```json\n{\"a\": 1}");
  EXPECT_TRUE(o.empty());  // the call is not final until its end marker
  o = p.feed("\n```" + s(kCallEnd));
  ASSERT_EQ(o.calls.size(), 1u);
  expect_call(o.calls[0], "f", R"({"a": 1})");
  EXPECT_TRUE(p.made_calls());
  EXPECT_TRUE(p.feed("\n").empty());
  EXPECT_TRUE(p.feed(s(kCallsEnd)).empty());
  EXPECT_TRUE(p.finish().empty());
}

TEST(ToolCallParser, GenerationCutShortInsideACall) {
  // max_tokens inside the arguments: the call is returned, marked incomplete, with what was written.
  Parsed p =
      parse_every_way(s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "f\n```json\n{\"a\": [1, 2");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", R"({"a": [1, 2)", false);
  // Before the name is complete nothing can be called: the text comes back.
  p = parse_every_way(s(kCallsBegin) + s(kCallBegin) + "func");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, s(kCallBegin) + "func");
  p = parse_every_way(s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "get_wea");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, s(kCallBegin) + "function" + s(kSep) + "get_wea");
  // A V3.1 name is whole once the separator follows it.
  p = parse_every_way(s(kCallBegin) + "get_weather" + s(kSep) + "{\"ci");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "get_weather", "{\"ci", false);
}

TEST(ToolCallParser, UnreadableCallsAndStrayTextAreKeptAsContent) {
  // No separator: the call's text is returned with its markers, nothing is lost.
  Parsed p =
      parse_every_way(s(kCallsBegin) + s(kCallBegin) + "no separator here" + s(kCallEnd) + s(kCallsEnd));
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, s(kCallBegin) + "no separator here" + s(kCallEnd));
  // A name that is not a function name.
  p = parse_every_way(s(kCallBegin) + "two words" + s(kSep) + "{}" + s(kCallEnd));
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, s(kCallBegin) + "two words" + s(kSep) + "{}" + s(kCallEnd));
  // Text between calls that is not a marker ends the calls; it and what follows are content.
  p = parse_every_way(s(kCallsBegin) + v3_call("f", "{}") + " and then prose");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "and then prose");
  // Text after the block is content too.
  p = parse_every_way(s(kCallsBegin) + v3_call("f", "{}") + s(kCallsEnd) + "done");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "done");
}

TEST(ToolCallParser, CountsUnreadableCalls) {
  ToolCallParser p;
  p.feed(s(kCallsBegin) + s(kCallBegin) + "no separator" + s(kCallEnd) + v3_call("f", "{}") + s(kCallBegin) +
         "x");
  p.finish();
  EXPECT_EQ(p.unreadable_calls(), 2u);  // the one without a separator and the cut one without a name
  EXPECT_TRUE(p.made_calls());
}

TEST(ToolCallParser, MissingEndMarkersAreForgiven) {
  // The next call's begin marker, or the block's end, closes a call whose end marker was left out.
  const std::string text = s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "a\n```json\n{}\n```" +
                           s(kCallBegin) + "function" + s(kSep) + "b\n```json\n{\"x\": 1}\n```" +
                           s(kCallsEnd);
  const Parsed p = parse_every_way(text);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "a", "{}");
  expect_call(p.calls[1], "b", R"({"x": 1})");
  // A call opened without the calls-begin marker (V3.1 does this) is read as well.
  const Parsed bare = parse_every_way("ok " + s(kCallBegin) + "f" + s(kSep) + "{}" + s(kCallEnd));
  EXPECT_EQ(bare.content, "ok ");
  ASSERT_EQ(bare.calls.size(), 1u);
  expect_call(bare.calls[0], "f", "{}");
}

TEST(ToolCallParser, PrefilledOpeningIsContinued) {
  // tool_choice naming a function: the prompt ends with the call's opening and the answer continues it.
  ToolCallParser p;
  EXPECT_TRUE(
      p.feed(s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "get_weather\n```json\n").empty());
  ToolParseOutput o = p.feed("{\"city\": \"Oslo\"}\n```" + s(kCallEnd) + s(kCallsEnd));
  ASSERT_EQ(o.calls.size(), 1u);
  expect_call(o.calls[0], "get_weather", R"({"city": "Oslo"})");
}

TEST(ToolCallParser, ReadToolCallLayouts) {
  ParsedToolCall c;
  ASSERT_TRUE(read_tool_call("function" + s(kSep) + "f\n```json\n{}\n```", c));
  expect_call(c, "f", "{}");
  // V3.1 with a function that happens to be named "function": its arguments start with '{', not a name.
  ASSERT_TRUE(read_tool_call("function" + s(kSep) + "{\"k\": 2}", c));
  expect_call(c, "function", R"({"k": 2})");
  ASSERT_TRUE(read_tool_call(" ns.tool " + s(kSep) + " {} ", c));
  expect_call(c, "ns.tool", "{}");
  EXPECT_FALSE(read_tool_call("f {}", c));
  EXPECT_FALSE(read_tool_call(s(kSep) + "{}", c));
}

}  // namespace
}  // namespace dsinfer::server
