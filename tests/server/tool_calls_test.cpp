// Tool calling in chat requests: tools / tool_choice validation, earlier calls and tool results rendered by
// DeepSeek-V3's template, the tools described in the prompt and the opening of a required call, and end to
// end through the server (a FakeEngine scripted to answer with DeepSeek's call markup) with and without
// streaming, and through the official openai npm client (skipped when tests/server/node/node_modules is
// absent).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "expect_error.h"
#include "http_test_client.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/tool_call_parser.h"
#include "server/tool_request.h"
#include "server_harness.h"
#include "subprocess.h"

namespace dsinfer::testing {
namespace {

using nlohmann::json;
using namespace server::tool_markup;
using server::ToolChoice;

std::string s(std::string_view v) {
  return std::string(v);
}

std::string v3_tokenizer_dir() {
  return std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3";
}

const Tokenizer& v3_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(v3_tokenizer_dir());
  return tok;
}

const json kWeatherTool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
const json kTimeTool = json::parse(R"({"type": "function", "function": {"name": "get_time"}})");

// The ApiError a call throws (fails the test when it throws none).
server::ApiError api_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const server::ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return server::ApiError(0, "");
}

TEST(ToolRequest, DefaultsAndChoices) {
  server::ToolRequest r = server::parse_tool_request(json::object());
  EXPECT_FALSE(r.active());
  r = server::parse_tool_request({{"tools", {kWeatherTool, kTimeTool}}});
  EXPECT_EQ(r.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.parallel);
  EXPECT_EQ(r.tools.size(), 2u);
  r = server::parse_tool_request({{"tools", {kWeatherTool}}, {"tool_choice", "none"}});
  EXPECT_FALSE(r.active());
  r = server::parse_tool_request({{"tools", {kWeatherTool}}, {"tool_choice", "required"}});
  EXPECT_EQ(r.choice, ToolChoice::kRequired);
  r = server::parse_tool_request(
      {{"tools", {kWeatherTool, kTimeTool}},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
       {"parallel_tool_calls", false}});
  EXPECT_EQ(r.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.forced_name, "get_time");
  EXPECT_FALSE(r.parallel);
  // "none" needs no tools; an explicit null is the default.
  EXPECT_FALSE(server::parse_tool_request({{"tool_choice", "none"}}).active());
  EXPECT_EQ(server::parse_tool_request({{"tools", {kWeatherTool}}, {"tool_choice", nullptr}}).choice,
            ToolChoice::kAuto);
}

TEST(ToolRequest, MalformedToolsAreRefusedNamingTheField) {
  struct Case {
    json body;
    std::string param;
  };
  json unnamed = kWeatherTool;
  unnamed["function"].erase("name");
  json bad_name = kWeatherTool;
  bad_name["function"]["name"] = "get weather";
  json bad_params = kWeatherTool;
  bad_params["function"]["parameters"] = "city";
  json not_function = kWeatherTool;
  not_function["type"] = "retrieval";
  json many = json::array();
  for (size_t i = 0; i <= server::kMaxTools; ++i)
    many.push_back({{"type", "function"}, {"function", {{"name", str_cat("f", i)}}}});
  const std::vector<Case> cases = {
      {{{"tools", kWeatherTool}}, "tools"},
      {{{"tools", {unnamed}}}, "tools"},
      {{{"tools", {bad_name}}}, "tools"},
      {{{"tools", {bad_params}}}, "tools"},
      {{{"tools", {not_function}}}, "tools"},
      {{{"tools", {kWeatherTool, kWeatherTool}}}, "tools"},
      {{{"tools", many}}, "tools"},
      {{{"tools", {kWeatherTool}}, {"tool_choice", "always"}}, "tool_choice"},
      {{{"tools", {kWeatherTool}}, {"tool_choice", 1}}, "tool_choice"},
      {{{"tools", {kWeatherTool}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", {kWeatherTool}}, {"parallel_tool_calls", "no"}}, "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    const server::ApiError e = api_error_of([&]() { server::parse_tool_request(c.body); });
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump();
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

TEST(ToolRequest, HistoryMessagesAreNormalised) {
  json m = json::parse(R"({"role": "assistant", "content": "",
      "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": {"a": 1}}}]})");
  server::normalize_tool_message(m, 0);
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  json no_calls = json::parse(R"({"role": "assistant", "content": "hi", "tool_calls": []})");
  server::normalize_tool_message(no_calls, 0);
  EXPECT_FALSE(no_calls.contains("tool_calls"));
  EXPECT_EQ(no_calls["content"], "hi");
  for (const char* bad :
       {R"({"role": "assistant", "tool_calls": {}})",
        R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})",
        R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]})",
        R"({"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f"}}]})",
        R"({"role": "tool", "tool_call_id": "c"})", R"({"role": "tool", "content": 5})",
        R"({"role": "tool", "content": "r", "tool_call_id": 7})"}) {
    json b = json::parse(bad);
    const server::ApiError e = api_error_of([&]() { server::normalize_tool_message(b, 3); });
    EXPECT_EQ(e.param, "messages") << bad;
    EXPECT_NE(std::string(e.what()).find("messages[3]"), std::string::npos) << e.what();
  }
}

TEST(ToolRequest, V3TemplateRendersEarlierCallsAndResults) {
  const json messages = server::normalize_messages(json::parse(R"([
      {"role": "system", "content": "S"},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\":20}"}])"));
  // What DeepSeek-V3's template writes for these messages (read from the template in tokenizer_config.json).
  const std::string expected =
      "<｜begin▁of▁sentence｜>S<｜User｜>Weather?<｜Assistant｜>" + s(kCallsBegin) + s(kCallBegin) +
      "function" + s(kSep) + "get_weather\n```json\n{\"city\":\"Paris\"}\n```" + s(kCallEnd) +
      "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{\"t\":20}<｜tool▁output▁end｜>"
      "<｜tool▁outputs▁end｜>";
  EXPECT_EQ(render_chat(v3_tokenizer(), messages, true), expected);
  // Without tools in this request the history renders the same.
  EXPECT_EQ(render_chat(v3_tokenizer(), server::tool_prompt({}, messages, v3_tokenizer()).messages, true),
            expected);

  // The template writes an assistant message's calls only when it has no content: given both, it would drop
  // the calls, which render_chat refuses ...
  json both = messages;
  both[2]["content"] = "Checking.";
  try {
    render_chat(v3_tokenizer(), both, true);
    ADD_FAILURE() << "rendered without the tool call";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[2].tool_calls[0]"), std::string::npos) << e.what();
  }
  // ... so the request's prompt writes the text followed by the calls, as the model wrote them.
  const json inlined = server::tool_prompt({}, both, v3_tokenizer()).messages;
  EXPECT_FALSE(inlined[2].contains("tool_calls"));
  const std::string answer = "Checking." + s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) +
                             "get_weather\n```json\n{\"city\":\"Paris\"}\n```" + s(kCallEnd) + s(kCallsEnd);
  EXPECT_EQ(inlined[2]["content"], answer);
  EXPECT_NE(
      render_chat(v3_tokenizer(), inlined, true).find("<｜Assistant｜>" + answer + "<｜end▁of▁sentence｜>"),
      std::string::npos);
}

TEST(ToolRequest, ToolsAreDescribedAfterTheSystemMessages) {
  const json messages =
      json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}])");
  server::ToolRequest r = server::parse_tool_request({{"tools", {kWeatherTool, kTimeTool}}});
  server::ToolPrompt p = server::tool_prompt(r, messages, v3_tokenizer());
  EXPECT_TRUE(p.prefill.empty());
  EXPECT_FALSE(p.variables.contains("tools"));  // V3's template does not render them
  ASSERT_EQ(p.messages.size(), 3u);
  EXPECT_EQ(p.messages[1]["role"], "system");
  const std::string rendered = render_chat(v3_tokenizer(), p.messages, true, p.variables);
  const std::string head = "<｜begin▁of▁sentence｜>S\n\n## Tools\n";
  EXPECT_EQ(rendered.substr(0, head.size()), head);
  for (const std::string& part :
       {std::string("### get_weather\nThe weather in a city now.\nParameters (JSON Schema):\n```json\n") +
            kWeatherTool["function"]["parameters"].dump() + "\n```\n",
        std::string("### get_time\nParameters (JSON Schema):\n```json\n{}\n```\n"),
        s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "FUNCTION_NAME\n```json\n"}) {
    EXPECT_NE(rendered.find(part), std::string::npos) << part;
  }
  // The description ends the system prompt.
  const std::string tail = s(kCallEnd) + s(kCallsEnd) + "\n<｜User｜>Q<｜Assistant｜>";
  EXPECT_TRUE(rendered.ends_with(tail)) << rendered;

  // A required call opens the block; a named one its call, up to the arguments.
  r.choice = ToolChoice::kRequired;
  EXPECT_EQ(server::tool_prompt(r, messages, v3_tokenizer()).prefill,
            s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep));
  r.choice = ToolChoice::kNamed;
  r.forced_name = "get_time";
  p = server::tool_prompt(r, messages, v3_tokenizer());
  EXPECT_EQ(p.prefill, s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "get_time\n```json\n");
  EXPECT_NE(p.messages[1]["content"].get<std::string>().find("This answer must call get_time."),
            std::string::npos);
  // Without system messages the description is the first message.
  r.choice = ToolChoice::kAuto;
  p = server::tool_prompt(r, json::parse(R"([{"role": "user", "content": "Q"}])"), v3_tokenizer());
  EXPECT_EQ(p.messages[0]["role"], "system");
  EXPECT_EQ(p.messages[1]["role"], "user");
}

TEST(ToolRequest, TemplatesThatRenderToolsGetThem) {
  EXPECT_FALSE(server::template_renders_tools(v3_tokenizer().chat_template()));
  EXPECT_TRUE(server::template_renders_tools("{% if tools is defined %}{{ tools }}{% endif %}"));
  EXPECT_FALSE(server::template_renders_tools("{{ message['tool_calls'] }} {{ ns.is_tool }}"));
}

TEST(ToolRequest, ModelsWithoutToolTokensRefuseTools) {
  const Tokenizer tiny = Tokenizer::load(tiny_model_dir());  // a 4096-token vocabulary without the markers
  const server::ToolRequest r = server::parse_tool_request({{"tools", {kWeatherTool}}});
  const server::ApiError e = api_error_of(
      [&]() { server::tool_prompt(r, json::parse(R"([{"role": "user", "content": "Q"}])"), tiny); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tools");
  EXPECT_EQ(e.code, "unsupported_parameter");
}

// The server with a FakeEngine whose answers are `script` (tokenized by DeepSeek-V3's tokenizer).
FakeEngine::Options scripted(const std::string& script) {
  FakeEngine::Options o;
  o.script = script;
  o.tokenizer_dir = v3_tokenizer_dir();
  return o;
}

json chat_body(const json& extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris and the time?"}}}},
               {"tools", {kWeatherTool, kTimeTool}},
               {"max_tokens", 200}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

const std::string kTwoCalls = "Checking." + s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) +
                              "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + s(kCallEnd) + "\n" +
                              s(kCallBegin) + "function" + s(kSep) + "get_time\n```json\n{}\n```" +
                              s(kCallEnd) + s(kCallsEnd);

TEST(ToolCallsServer, AnswerWithCalls) {
  ServerHarness h({}, scripted(kTwoCalls));
  HttpResult r = post(h.port, "/v1/chat/completions", chat_body(json::object()).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  const json calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  EXPECT_EQ(calls[0]["id"].get<std::string>().substr(0, 5), "call_");
  EXPECT_EQ(calls[0]["id"].get<std::string>().size(), 29u);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_FALSE(calls[0].contains("index"));

  // parallel_tool_calls false: the first call only.
  r = post(h.port, "/v1/chat/completions", chat_body({{"parallel_tool_calls", false}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["tool_calls"].size(), 1u);

  // tool_choice "none": the tools are neither described nor read; the markup stays text.
  r = post(h.port, "/v1/chat/completions", chat_body({{"tool_choice", "none"}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json plain = json::parse(r.body)["choices"][0];
  EXPECT_EQ(plain["message"]["content"], kTwoCalls);
  EXPECT_FALSE(plain["message"].contains("tool_calls"));
  EXPECT_EQ(plain["finish_reason"], "stop");
  const std::string prompt = v3_tokenizer().decode(h.engine->last_prompt());
  EXPECT_EQ(prompt.find("## Tools"), std::string::npos);

  // Counted for alerting: 2 + 1 calls so far.
  const std::string metrics = get(h.port, "/metrics").body;
  EXPECT_NE(metrics.find("\ndsinfer_tool_calls_total 3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ndsinfer_tool_call_parse_failures_total 0\n"), std::string::npos);

  // The engine holds get_weather's arguments to its parameters (get_time declares none: any object).
  r = post(h.port, "/v1/chat/completions", chat_body(json::object()).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const SamplingParams sampling = h.engine->last_sampling();
  EXPECT_TRUE(sampling.json_tool_arguments);
  ASSERT_EQ(sampling.tool_schemas.size(), 1u);
  EXPECT_EQ(sampling.tool_schemas[0].first, "get_weather");
  // Parameters the decoder cannot enforce: refused for a strict function, any object for another.
  json strict_tool = json::parse(R"({"type": "function", "function": {"name": "lookup", "strict": true,
      "parameters": {"type": "object", "properties": {"qty": {"type": "number", "multipleOf": 5}}}}})");
  r = post(h.port, "/v1/chat/completions", chat_body({{"tools", {strict_tool}}}).dump());
  expect_error(r, 400, "tools", "invalid_value");
  EXPECT_NE(r.body.find("tools[0].function.parameters cannot be enforced (strict)"), std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("'multipleOf'"), std::string::npos) << r.body;
  for (const json& strict : {json(false), json(nullptr)}) {  // (null was a 500: read as a bool)
    strict_tool["function"]["strict"] = strict;
    r = post(h.port, "/v1/chat/completions", chat_body({{"tools", {strict_tool}}}).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(h.engine->last_sampling().tool_schemas.empty());
  }

  // JSON mode and tools exclude each other.
  expect_error(post(h.port, "/v1/chat/completions",
                    chat_body({{"response_format", {{"type", "json_object"}}}}).dump()),
               400, "response_format", "invalid_value");
}

TEST(ToolCallsServer, StreamedCallsAccumulateToTheSameAnswer) {
  ServerHarness h({}, scripted(kTwoCalls));
  HttpResult r = post(h.port, "/v1/chat/completions", chat_body({{"stream", true}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::string content, finish;
  std::map<int, json> calls;  // by index: what a client accumulates
  for (const std::string& p : sse_payloads(r.body)) {
    if (p == "[DONE]") continue;
    const json d = json::parse(p)["choices"][0];
    if (d["delta"].contains("content")) {
      const std::string piece = d["delta"]["content"];
      EXPECT_EQ(piece.find("<｜tool"), std::string::npos) << piece;  // markup never reaches the content
      content += piece;
    }
    for (const json& c : d["delta"].value("tool_calls", json::array())) {
      json& acc = calls[c["index"].get<int>()];
      if (c.contains("id")) acc["id"] = c["id"];
      acc["name"] = acc.value("name", "") + c["function"].value("name", "");
      acc["arguments"] = acc.value("arguments", "") + c["function"].value("arguments", "");
    }
    if (!d["finish_reason"].is_null()) finish = d["finish_reason"];
  }
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(calls[0]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(calls[1]["name"], "get_time");
  EXPECT_EQ(calls[1]["arguments"], "{}");
}

TEST(ToolCallsServer, NamedChoiceOpensTheCallInThePrompt) {
  // The prompt ends inside get_weather's call: the model writes only its arguments.
  ServerHarness h({}, scripted("{\"city\": \"Oslo\"}\n```" + s(kCallEnd) + s(kCallsEnd)));
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (bool stream : {false, true}) {
    HttpResult r =
        post(h.port, "/v1/chat/completions", chat_body({{"tool_choice", named}, {"stream", stream}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string prompt = v3_tokenizer().decode(h.engine->last_prompt());
    const std::string opening =
        s(kCallsBegin) + s(kCallBegin) + "function" + s(kSep) + "get_weather\n```json\n";
    ASSERT_GE(prompt.size(), opening.size());
    EXPECT_EQ(prompt.substr(prompt.size() - opening.size()), opening);
    // /tokenize with the same body counts the same prompt.
    const json counted =
        json::parse(post(h.port, "/tokenize", chat_body({{"tool_choice", named}}).dump()).body);
    EXPECT_EQ(counted["tokens"].get<std::vector<int32_t>>(), h.engine->last_prompt());
    std::string name, args;
    if (!stream) {
      const json call = json::parse(r.body)["choices"][0]["message"]["tool_calls"][0];
      name = call["function"]["name"];
      args = call["function"]["arguments"];
    } else {
      for (const std::string& p : sse_payloads(r.body)) {
        if (p == "[DONE]") continue;
        for (const json& c : json::parse(p)["choices"][0]["delta"].value("tool_calls", json::array())) {
          name += c["function"].value("name", "");
          args += c["function"].value("arguments", "");
        }
      }
    }
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(args, "{\"city\": \"Oslo\"}");
  }
}

TEST(ToolCallsServer, CutShortCallEndsWithLength) {
  ServerHarness h({}, scripted(kTwoCalls));
  // Enough tokens for the first call's name line and some of its arguments only.
  const std::string upto = kTwoCalls.substr(0, kTwoCalls.find("\"Paris"));
  const int64_t max_tokens = static_cast<int64_t>(v3_tokenizer().encode(upto).size());
  HttpResult r = post(h.port, "/v1/chat/completions", chat_body({{"max_tokens", max_tokens}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  const std::string args = choice["message"]["tool_calls"][0]["function"]["arguments"];
  EXPECT_FALSE(args.empty());
  EXPECT_EQ(std::string("{\"city\": \"Paris\"}").rfind(args, 0), 0u) << args;  // a start of the arguments
}

TEST(ToolCallsServer, UnreadableCallsStayTextAndAreCounted) {
  const std::string broken = "Trying." + s(kCallsBegin) + s(kCallBegin) + "get weather" + s(kSep) + "{}" +
                             s(kCallEnd) + s(kCallsEnd);
  ServerHarness h({}, scripted(broken));
  HttpResult r = post(h.port, "/v1/chat/completions", chat_body(json::object()).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["message"]["content"],
            "Trying." + s(kCallBegin) + "get weather" + s(kSep) + "{}" + s(kCallEnd));
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_NE(get(h.port, "/metrics").body.find("\ndsinfer_tool_call_parse_failures_total 1\n"),
            std::string::npos);
}

TEST(ToolCallsServer, ToolResultsContinueTheConversation) {
  ServerHarness h({}, scripted("It is 20 degrees."));
  json body = chat_body(json::object());
  body["messages"].push_back(json::parse(R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
      "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]})"));
  body["messages"].push_back(json::parse(R"({"role": "tool", "tool_call_id": "c1", "content": "20C"})"));
  HttpResult r = post(h.port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["message"]["content"], "It is 20 degrees.");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  const std::string prompt = v3_tokenizer().decode(h.engine->last_prompt());
  EXPECT_NE(prompt.find("<｜tool▁output▁begin｜>20C<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"),
            std::string::npos)
      << prompt;
  // A malformed earlier call is refused naming the message.
  body["messages"][1]["tool_calls"][0]["function"]["arguments"] = 5;
  expect_error(post(h.port, "/v1/chat/completions", body.dump()), 400, "messages", "invalid_value");
}

TEST(ToolCallsServer, OpenAiNpmClient) {
  const std::string node_dir = std::string(DSINFER_SOURCE_DIR) + "/tests/server/node";
  if (!std::filesystem::exists(node_dir + "/node_modules/openai")) {
    GTEST_SKIP()
        << "tests/server/node/node_modules is absent: run scripts/setup.sh (npm install) to enable this test";
  }
  ServerHarness h({}, scripted(kTwoCalls));
  int rc = 0;
  const std::string out = run_capture("node " + shell_quote(node_dir + "/tool_calls_client_test.mjs") + " " +
                                          std::to_string(h.port) + " 2>&1",
                                      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace dsinfer::testing
