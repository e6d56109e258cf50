// Tests for StopChecker: stop strings across deltas, hold-back, stop tokens, EOS, max_tokens, UTF-8.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/finish_reason.h"

namespace dsinfer {
namespace {

constexpr int32_t kEos = 1;

SamplingParams with_stops(std::vector<std::string> stops, int32_t max_tokens = 100) {
  SamplingParams p;
  p.stop = std::move(stops);
  p.max_tokens = max_tokens;
  return p;
}

// Feeds deltas as tokens 100, 101, ...; returns everything emitted (plus finish()) and the checker.
struct StreamResult {
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::string stop_string;
  std::vector<std::string> emitted;  // per-token emitted text
};
StreamResult feed(const SamplingParams& params, const std::vector<std::string>& deltas) {
  StopChecker checker(params, {kEos});
  StreamResult run;
  int32_t token = 100;
  for (const std::string& delta : deltas) {
    const StopUpdate update = checker.on_token(token++, delta);
    run.emitted.push_back(update.text);
    run.text += update.text;
    if (update.finished()) {
      run.reason = update.reason;
      run.stop_string = update.stop_string;
      break;
    }
  }
  run.text += checker.finish();
  return run;
}

TEST(FinishReasonTest, ApiSpellings) {
  EXPECT_EQ(to_string(FinishReason::kStop), "stop");
  EXPECT_EQ(to_string(FinishReason::kEos), "stop");
  EXPECT_EQ(to_string(FinishReason::kLength), "length");
  EXPECT_EQ(to_string(FinishReason::kNone), "none");
}

TEST(StopCheckerTest, NoStopsEmitsEverythingImmediately) {
  const StreamResult run = feed(with_stops({}), {"Hello", ", ", "world"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"Hello", ", ", "world"}));
  EXPECT_EQ(run.reason, FinishReason::kNone);
}

TEST(StopCheckerTest, StopStringSpanningDeltasIsNeverPartiallyEmitted) {
  const StreamResult run = feed(with_stops({"END"}), {"foo E", "N", "D bar"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"foo ", "", ""}));
  EXPECT_EQ(run.text, "foo ");
  EXPECT_EQ(run.reason, FinishReason::kStop);
  EXPECT_EQ(run.stop_string, "END");
}

TEST(StopCheckerTest, StopStringAtTheVeryStart) {
  const StreamResult run = feed(with_stops({"###"}), {"###", "more"});
  EXPECT_EQ(run.text, "");
  EXPECT_EQ(run.reason, FinishReason::kStop);
  EXPECT_EQ(run.emitted.size(), 1u);
}

TEST(StopCheckerTest, BrokenPrefixIsReleased) {
  // "ab" may start "abc"; "d" breaks it, so "abd" is emitted in full.
  const StreamResult run = feed(with_stops({"abc"}), {"ab", "d", "x"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"", "abd", "x"}));
  EXPECT_EQ(run.reason, FinishReason::kNone);
}

TEST(StopCheckerTest, OverlappingPrefixRestartsInsideHeldText) {
  // "aab": after "aa" the held "a" may still start "ab" ("aab" contains "ab" at 1).
  const StreamResult run = feed(with_stops({"ab"}), {"a", "a", "b"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"", "a", ""}));
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.reason, FinishReason::kStop);
  // "ababac" with stop "abac": the second "ab" must be held after the first is released.
  const StreamResult longer = feed(with_stops({"abac"}), {"ab", "ab", "ac", "zz"});
  EXPECT_EQ(longer.emitted, (std::vector<std::string>{"", "ab", ""}));
  EXPECT_EQ(longer.text, "ab");
}

TEST(StopCheckerTest, EarliestOfMultipleStopStringsWins) {
  const StreamResult run = feed(with_stops({"world", "lo"}), {"hello world"});
  EXPECT_EQ(run.text, "hel");
  EXPECT_EQ(run.stop_string, "lo");
  const auto match = find_stop_string("xx abcd", std::vector<std::string>{"abcd", "ab", "cd"});
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->pos, 3u);
  EXPECT_EQ(match->index, 1u);  // same start as "abcd": the shorter completes first
  EXPECT_FALSE(find_stop_string("abc", std::vector<std::string>{"x"}).has_value());
}

TEST(StopCheckerTest, HeldTextIsReleasedAtFinish) {
  StopChecker checker(with_stops({"STOP"}), {kEos});
  EXPECT_EQ(checker.on_token(5, "done ST").text, "done ");
  EXPECT_EQ(checker.held(), "ST");
  EXPECT_EQ(checker.finish(), "ST");
  EXPECT_EQ(checker.reason(), FinishReason::kNone);
}

TEST(StopCheckerTest, StopTokenIdEndsAndReleasesHeldText) {
  SamplingParams p = with_stops({"STOP"});
  p.stop_token_ids = {42};
  StopChecker checker(p, {kEos});
  EXPECT_EQ(checker.on_token(5, "x S").text, "x ");
  const StopUpdate update = checker.on_token(42, "<tool>");
  EXPECT_EQ(update.reason, FinishReason::kStop);
  EXPECT_EQ(update.stop_token, 42);
  EXPECT_EQ(update.text, "S");  // the stop token's own text is not emitted
  EXPECT_TRUE(checker.finished());
  EXPECT_EQ(checker.finish(), "");
  EXPECT_THROW(checker.on_token(6, "y"), Error);
}

TEST(StopCheckerTest, EosStopsUnlessIgnored) {
  StopChecker checker(with_stops({}), {kEos});
  checker.on_token(5, "a");
  const StopUpdate update = checker.on_token(kEos, "<eos>");
  EXPECT_EQ(update.reason, FinishReason::kEos);
  EXPECT_EQ(update.text, "");
  EXPECT_EQ(update.stop_token, kEos);

  SamplingParams ignore = with_stops({});
  ignore.ignore_eos = true;
  StopChecker ignoring(ignore, {kEos});
  const StopUpdate kept = ignoring.on_token(kEos, "<eos>");
  EXPECT_EQ(kept.reason, FinishReason::kNone);
  EXPECT_EQ(kept.text, "<eos>");
}

TEST(StopCheckerTest, IgnoreEosStillHonoursStopTokenIds) {
  SamplingParams p = with_stops({});
  p.ignore_eos = true;
  p.stop_token_ids = {kEos};
  StopChecker checker(p, {kEos});
  EXPECT_EQ(checker.on_token(kEos, "").reason, FinishReason::kStop);
}

TEST(StopCheckerTest, MaxTokensGivesLengthAndReleasesHeldText) {
  const StreamResult run = feed(with_stops({"STOP"}, 3), {"a", "b", "c S", "never"});
  EXPECT_EQ(run.reason, FinishReason::kLength);
  EXPECT_EQ(to_string(run.reason), "length");
  EXPECT_EQ(run.text, "abc S");
  EXPECT_EQ(run.emitted.size(), 3u);
}

TEST(StopCheckerTest, StopStringBeatsLengthOnTheSameToken) {
  const StreamResult run = feed(with_stops({"!"}, 2), {"a", "b!"});
  EXPECT_EQ(run.reason, FinishReason::kStop);
  EXPECT_EQ(run.text, "ab");
}

TEST(StopCheckerTest, Utf8MultiByteStopStrings) {
  // "。" is E3 80 82; "停止" is two 3-byte characters. Deltas split between characters.
  const StreamResult run = feed(with_stops({"停止"}), {"你好", "停", "止了"});
  EXPECT_EQ(run.emitted, (std::vector<std::string>{"你好", "", ""}));
  EXPECT_EQ(run.text, "你好");
  EXPECT_EQ(run.reason, FinishReason::kStop);
  // A held first character that turns out not to start the stop string comes back whole.
  const StreamResult broken = feed(with_stops({"停止"}), {"停", "下"});
  EXPECT_EQ(broken.emitted, (std::vector<std::string>{"", "停下"}));
  // A stop string sharing a lead byte with the text: "。" vs "、" (E3 80 81).
  const StreamResult punct = feed(with_stops({"。"}), {"a、b", "。c"});
  EXPECT_EQ(punct.text, "a、b");
  EXPECT_EQ(punct.reason, FinishReason::kStop);
}

TEST(StopCheckerTest, NonStreamingHelper) {
  SamplingParams p = with_stops({"</s>"});
  const std::vector<int32_t> tokens = {10, 11, 12, 13};
  const std::vector<std::string> deltas = {"The ", "answer<", "/s>", "ignored"};
  const StopOutcome outcome = apply_stop_conditions(p, {kEos}, tokens, deltas);
  EXPECT_EQ(outcome.text, "The answer");
  EXPECT_EQ(outcome.reason, FinishReason::kStop);
  EXPECT_EQ(outcome.num_tokens, 3);

  const StopOutcome unfinished =
      apply_stop_conditions(p, {kEos}, std::vector<int32_t>{10, 11}, std::vector<std::string>{"a", "</"});
  EXPECT_EQ(unfinished.text, "a</");
  EXPECT_EQ(unfinished.reason, FinishReason::kNone);
  EXPECT_THROW(apply_stop_conditions(p, {}, tokens, std::vector<std::string>{"x"}), Error);
}

}  // namespace
}  // namespace dsinfer
