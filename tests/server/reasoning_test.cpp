// Thinking in chat answers: ReasoningParser (tags in the answer or opened by the prompt, any piece sizes,
// tags split across pieces, unclosed thinking), when it is enabled, and end to end through the server with
// and without streaming, alone and before tool calls; chat_template_kwargs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "expect_error.h"
#include "http_test_client.h"
#include "server/openai_request.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server_harness.h"
#include "tokenizer/file_io.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;
using server::ReasoningOutput;
using server::ReasoningParser;

ReasoningOutput parse_in_pieces(const std::string& text, size_t piece, bool opened) {
  ReasoningParser p(opened);
  ReasoningOutput out;
  auto take = [&](const ReasoningOutput& o) {
    out.reasoning += o.reasoning;
    out.content += o.content;
  };
  for (size_t at = 0; at < text.size(); at += piece) take(p.feed(std::string_view(text).substr(at, piece)));
  take(p.finish());
  return out;
}

// The same split whatever the piece size (one byte upwards); returns it.
ReasoningOutput parse_every_way(const std::string& text, bool opened = false) {
  const ReasoningOutput whole = parse_in_pieces(text, text.size() + 1, opened);
  for (size_t piece = 1; piece <= 24; ++piece) {
    const ReasoningOutput split = parse_in_pieces(text, piece, opened);
    EXPECT_EQ(split.reasoning, whole.reasoning) << "piece " << piece;
    EXPECT_EQ(split.content, whole.content) << "piece " << piece;
  }
  return whole;
}

TEST(ReasoningParser, ThinkingThenAnswer) {
  ReasoningOutput o = parse_every_way("<think>\nFirst, 2 + 2.\nThat is 4.\n</think>\n\nIt is 4.");
  EXPECT_EQ(o.reasoning, "First, 2 + 2.\nThat is 4.");
  EXPECT_EQ(o.content, "It is 4.");
  // Opened by the prompt (R1-0528's template ends it with "<think>\n").
  o = parse_every_way("First, 2 + 2.\n</think>\n\nIt is 4.", true);
  EXPECT_EQ(o.reasoning, "First, 2 + 2.");
  EXPECT_EQ(o.content, "It is 4.");
  // Whitespace inside either part is kept.
  o = parse_every_way("<think>a  \n b</think>c \n d ");
  EXPECT_EQ(o.reasoning, "a  \n b");
  EXPECT_EQ(o.content, "c \n d ");
}

TEST(ReasoningParser, AnswersWithoutThinkingAreUntouched) {
  for (const std::string& text : {std::string("It is 4."), std::string("  leading space"),
                                  std::string("<thinking is hard>"), std::string("<thin"), std::string("")}) {
    const ReasoningOutput o = parse_every_way(text);
    EXPECT_EQ(o.content, text);
    EXPECT_EQ(o.reasoning, "");
  }
  // A </think> without an opening is text.
  EXPECT_EQ(parse_every_way("a</think>b").content, "a</think>b");
}

TEST(ReasoningParser, UnclosedThinkingIsAllReasoning) {
  // max_tokens while thinking.
  ReasoningOutput o = parse_every_way("<think>\nStill going </thi");
  EXPECT_EQ(o.reasoning, "Still going </thi");
  EXPECT_EQ(o.content, "");
  o = parse_every_way("", true);
  EXPECT_EQ(o.reasoning, "");
}

TEST(ReasoningParser, HoldsBackOnlyWhatMayBeTheClosingTag) {
  ReasoningParser p(true);
  ReasoningOutput o = p.feed("abc \n</th");
  EXPECT_EQ(o.reasoning, "abc");  // the whitespace and "</th" wait
  o = p.feed("at");
  EXPECT_EQ(o.reasoning, " \n</that");
  o = p.feed(" x</think>y");
  EXPECT_EQ(o.reasoning, " x");
  EXPECT_EQ(o.content, "y");
}

TEST(ReasoningParser, EnabledByModeOrTokenizer) {
  const std::string v3_dir = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3";
  const Tokenizer v3 = Tokenizer::load(v3_dir);
  EXPECT_FALSE(server::reasoning_enabled("auto", v3));  // V3 has no <think> token
  EXPECT_TRUE(server::reasoning_enabled("deepseek_r1", v3));
  EXPECT_FALSE(server::reasoning_enabled("none", v3));
  // R1's tokenizer is V3's with two placeholders renamed <think> and </think>.
  json tj = json::parse(read_gzip_file(v3_dir + "/tokenizer.json.gz"));
  for (json& t : tj["added_tokens"]) {
    if (t["id"] == 128798) t["content"] = "<think>";
    if (t["id"] == 128799) t["content"] = "</think>";
    if (t["id"] == 128798 || t["id"] == 128799) t["special"] = false;
  }
  const Tokenizer r1 = Tokenizer::from_json(tj.dump(), read_file(v3_dir + "/tokenizer_config.json"));
  EXPECT_TRUE(server::reasoning_enabled("auto", r1));
  EXPECT_FALSE(server::reasoning_enabled("none", r1));
  EXPECT_EQ(r1.encode("<think>"), std::vector<int32_t>({128798}));
  EXPECT_TRUE(server::prompt_opens_reasoning(r1, r1.encode("<｜User｜>Hi<｜Assistant｜><think>\n")));
  EXPECT_FALSE(server::prompt_opens_reasoning(r1, r1.encode("<｜User｜>Hi<｜Assistant｜></think>")));
  EXPECT_FALSE(server::prompt_opens_reasoning(r1, r1.encode("<｜User｜>Hi<｜Assistant｜>")));
  EXPECT_TRUE(server::prompt_opens_reasoning(v3, v3.encode("Hi<think>")));  // several tokens in V3's
  EXPECT_FALSE(server::prompt_opens_reasoning(v3, {}));
}

const std::string kThinking = "<think>\nThe user asks 2 + 2.\n</think>\n\nIt is 4.";

struct Streamed {
  std::string reasoning, content, finish;
  std::vector<json> calls;
};

Streamed read_stream(const std::string& body) {
  Streamed s;
  for (const std::string& p : sse_payloads(body)) {
    if (p == "[DONE]") continue;
    const json c = json::parse(p)["choices"][0];
    s.reasoning += c["delta"].value("reasoning_content", "");
    s.content += c["delta"].value("content", "");
    for (const json& call : c["delta"].value("tool_calls", json::array())) s.calls.push_back(call);
    if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"];
  }
  return s;
}

TEST(ReasoningServer, ThinkingIsReasoningContent) {
  std::unique_ptr<ServerHarness> h = std::make_unique<ServerHarness>(
      [](server::ServeConfig& c) { c.server.reasoning_parser = "deepseek_r1"; },
      FakeEngine::Options{.script = kThinking,
                          .tokenizer_dir = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3"});
  const json body = {{"messages", {{{"role", "user"}, {"content", "2 + 2?"}}}}, {"max_tokens", 100}};
  HttpResult r = post(h->port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = json::parse(r.body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "The user asks 2 + 2.");
  EXPECT_EQ(m["content"], "It is 4.");
  json streamed = body;
  streamed["stream"] = true;
  r = post(h->port, "/v1/chat/completions", streamed.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Streamed s = read_stream(r.body);
  EXPECT_EQ(s.reasoning, "The user asks 2 + 2.");
  EXPECT_EQ(s.content, "It is 4.");
  EXPECT_EQ(s.finish, "stop");
  // Completions are never parsed.
  r = post(h->port, "/v1/completions", R"({"prompt": "x", "max_tokens": 100})");
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], kThinking);
}

TEST(ReasoningServer, OffLeavesTheTextAlone) {
  for (const char* mode : {"none", "auto"}) {  // auto: V3's tokenizer has no <think> token
    ServerHarness h(
        [mode](server::ServeConfig& c) { c.server.reasoning_parser = mode; },
        FakeEngine::Options{.script = kThinking,
                            .tokenizer_dir = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3"});
    HttpResult r =
        post(h.port, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "q"}]})");
    ASSERT_EQ(r.status, 200) << r.body;
    const json m = json::parse(r.body)["choices"][0]["message"];
    EXPECT_EQ(m["content"], kThinking);
    EXPECT_FALSE(m.contains("reasoning_content"));
  }
}

TEST(ReasoningServer, ThinkingBeforeToolCalls) {
  using namespace server::tool_markup;
  const std::string script = "<think>\nI need the weather.\n</think>\n\n" + std::string(kCallsBegin) +
                             std::string(kCallBegin) + "function" + std::string(kSep) +
                             "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" + std::string(kCallEnd) +
                             std::string(kCallsEnd);
  ServerHarness h(
      [](server::ServeConfig& c) { c.server.reasoning_parser = "deepseek_r1"; },
      FakeEngine::Options{.script = script,
                          .tokenizer_dir = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3"});
  json body =
      json::parse(R"({"messages": [{"role": "user", "content": "Weather in Oslo?"}], "max_tokens": 100,
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})");
  for (bool stream : {false, true}) {
    body["stream"] = stream;
    HttpResult r = post(h.port, "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    Streamed s;
    if (stream) {
      s = read_stream(r.body);
    } else {
      const json c = json::parse(r.body)["choices"][0];
      s.reasoning = c["message"]["reasoning_content"];
      EXPECT_TRUE(c["message"]["content"].is_null());
      s.calls = c["message"]["tool_calls"];
      s.finish = c["finish_reason"];
    }
    EXPECT_EQ(s.reasoning, "I need the weather.");
    EXPECT_EQ(s.content, "");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(s.calls[0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
    EXPECT_EQ(s.finish, "tool_calls");
  }
}

// A tokenizer directory whose chat template opens the thinking after the generation prompt (as R1-0528's).
std::string thinking_template_dir() {
  const std::string v3 = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3";
  const std::string dir = ::testing::TempDir() + "/thinking-tokenizer";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(v3 + "/tokenizer.json.gz", dir + "/tokenizer.json.gz",
                             std::filesystem::copy_options::overwrite_existing);
  json config = json::parse(read_file(v3 + "/tokenizer_config.json"));
  config["chat_template"] =
      config["chat_template"].get<std::string>() + "{% if add_generation_prompt %}<think>\n{% endif %}";
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  return dir;
}

TEST(ReasoningServer, PromptOpenedThinking) {
  const std::string dir = thinking_template_dir();
  ServerHarness h([](server::ServeConfig& c) { c.server.reasoning_parser = "deepseek_r1"; },
                  FakeEngine::Options{.script = "Hmm.\n</think>\n\nDone.", .tokenizer_dir = dir});
  const std::string ask = R"("messages": [{"role": "user", "content": "q"}], "max_tokens": 50)";
  json m = json::parse(post(h.port, "/v1/chat/completions", "{" + ask + "}").body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Hmm.");
  EXPECT_EQ(m["content"], "Done.");
  // JSON mode: the answer is the object, not thinking, even where the prompt opened the thinking.
  ServerHarness j([](server::ServeConfig& c) { c.server.reasoning_parser = "deepseek_r1"; },
                  FakeEngine::Options{.script = "{\"a\": 1}", .tokenizer_dir = dir});
  m = json::parse(
      post(j.port, "/v1/chat/completions", "{" + ask + R"(, "response_format": {"type": "json_object"}})")
          .body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "{\"a\": 1}");
  EXPECT_FALSE(m.contains("reasoning_content"));
}

TEST(ReasoningServer, ChatTemplateKwargs) {
  ServerHarness h;
  const std::string hi = R"("messages": [{"role": "user", "content": "hi"}], "max_tokens": 2)";
  EXPECT_EQ(
      post(h.port, "/v1/chat/completions", "{" + hi + R"(, "chat_template_kwargs": {"thinking": true}})")
          .status,
      200);
  expect_error(post(h.port, "/v1/chat/completions", "{" + hi + R"(, "chat_template_kwargs": [1]})"), 400,
               "chat_template_kwargs", "invalid_type");
  expect_error(
      post(h.port, "/v1/chat/completions", "{" + hi + R"(, "chat_template_kwargs": {"bos_token": "x"}})"),
      400, "chat_template_kwargs", "invalid_value");
  // The variables reach the template.
  json config = json::parse(read_file(tiny_model_dir() + "/tokenizer_config.json"));
  config["chat_template"] = "{{ greeting }}|{% for m in messages %}{{ m['content'] }}{% endfor %}";
  const Tokenizer tok = Tokenizer::from_json(read_file(tiny_model_dir() + "/tokenizer.json"), config.dump());
  const json messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  const server::ToolPrompt tp =
      server::chat_template_inputs({{"chat_template_kwargs", {{"greeting", "hello"}}}}, messages, {}, tok);
  EXPECT_EQ(render_chat(tok, tp.messages, true, tp.variables), "hello|hi");
}

TEST(ReasoningServer, ConfigKey) {
  server::ServeConfig c;
  EXPECT_EQ(c.server.reasoning_parser, "auto");
  server::load_config_text("server:\n  reasoning_parser: none\n", "test.yaml", c);
  EXPECT_EQ(c.server.reasoning_parser, "none");
  server::validate(c);
  c.server.reasoning_parser = "r1";
  try {
    server::validate(c);
    ADD_FAILURE() << "accepted reasoning_parser r1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("server.reasoning_parser"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsinfer::testing
