// OpenAI API handlers: request parsing, model checks, tokenization endpoints and job start.
#include "server/api_handlers.h"

#include <cctype>
#include <chrono>

#include "core/error.h"
#include "engine/prompt.h"
#include "server/api_error.h"
#include "server/completion_job.h"
#include "server/openai_response.h"
#include "server/reasoning_parser.h"
#include "server/resilience_http.h"

namespace dsinfer::server {

using nlohmann::json;

namespace {

HttpResponse json_response(const json& body) {
  HttpResponse r;
  r.body = dump(body);
  return r;
}

// The engine, or 503 while the model loads.
Engine& ready_engine(ServerContext& ctx) {
  Engine* engine = ctx.engine.load();
  if (!engine)
    throw ApiError(503, "the model is not loaded yet (" + ctx.health.reason() + ")", "service_unavailable");
  return *engine;
}

void check_model(const ServerContext& ctx, const json& body) {
  if (!body.contains("model") || body["model"].is_null()) return;
  if (!body["model"].is_string()) throw bad_request("'model' must be a string", "model", "invalid_type");
  const std::string model = body["model"].get<std::string>();
  if (model != ctx.model_name) {
    throw ApiError(404,
                   "The model '" + model + "' does not exist (this server serves '" + ctx.model_name + "')",
                   "invalid_request_error", "model", "model_not_found");
  }
}

template <typename F>
void guarded(const ServerContext& ctx, const std::shared_ptr<Responder>& out, F&& body) {
  try {
    body();
  } catch (const ApiError& e) {
    HttpResponse r = error_response(e);
    if (e.retry_after_seconds > 0) {
      r.headers.emplace_back("Retry-After", std::to_string(static_cast<int64_t>(e.retry_after_seconds)));
    } else if (e.status == 429) {
      r.headers.emplace_back("Retry-After", retry_after(ctx.config.server));
    }
    out->send(std::move(r));
  } catch (const Error& e) {
    out->send(error_response(bad_request(e.what())));
  } catch (const std::exception& e) {
    out->send(error_response(ApiError(500, std::string("internal error: ") + e.what(), "server_error")));
  }
}

}  // namespace

bool authorized(const ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out) {
  const std::string& key = ctx.config.server.api_key;
  if (key.empty()) return true;
  const std::string& auth = req.header("authorization");
  const std::string prefix = "Bearer ";
  std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : "";
  if (given.empty()) given = req.header("x-api-key");
  // Length-independent comparison of equal-length strings.
  bool ok = given.size() == key.size();
  unsigned char diff = 0;
  for (size_t i = 0; ok && i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  if (ok && diff == 0) return true;
  HttpResponse r = error_response(ApiError(
      401,
      given.empty() ? "Missing API key: send \"Authorization: Bearer <key>\"" : "Incorrect API key provided",
      "invalid_request_error", "", "invalid_api_key"));
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  out->send(std::move(r));
  return false;
}

void handle_completions(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out,
                        bool chat) {
  const auto arrival = std::chrono::steady_clock::now();
  guarded(ctx, out, [&]() {
    if (ctx.health.phase() == Phase::kDraining) {
      throw ApiError(503, "the server is shutting down", "service_unavailable");
    }
    const json body = parse_json_body(req.body);
    check_model(ctx, body);
    Engine& engine = ready_engine(ctx);
    CompletionRequest parsed = parse_completion_request(body, chat, engine.tokenizer(), ctx.limits, req.body);
    // JSON mode: the whole answer is the object, never thinking.
    if (chat && !parsed.sampling.json_object &&
        reasoning_enabled(ctx.config.server.reasoning_parser, engine.tokenizer())) {
      parsed.reasoning = true;
      parsed.reasoning_opened = prompt_opens_reasoning(engine.tokenizer(), parsed.prompts[0]);
    }
    check_admission(engine);  // the circuit breaker: 503 + Retry-After while open
    auto job = std::make_shared<CompletionJob>(ctx, std::move(parsed), out, arrival);
    job->start();
  });
}

namespace {

// The served model as /v1/models lists it.
json model_json(const ServerContext& ctx) {
  const int64_t created = 0;
  // Limits are known once the engine is attached (set_engine writes them before publishing the engine).
  const int64_t max_model_len = ctx.engine.load() ? ctx.limits.max_model_len : 0;
  return {{"id", ctx.model_name},          {"object", "model"},      {"created", created},
          {"owned_by", "dsinfer"},         {"root", ctx.model_name}, {"parent", nullptr},
          {"max_model_len", max_model_len}};
}

// %XX escapes decoded (a model name with '/' may come either way); a malformed escape stays as it is.
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

void handle_models(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out) {
  out->send(json_response({{"object", "list"}, {"data", json::array({model_json(ctx)})}}));
}

void handle_model(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out) {
  const std::string name = percent_decoded(req.path.substr(std::string("/v1/models/").size()));
  if (name != ctx.model_name) {
    out->send(error_response(
        ApiError(404, "The model '" + name + "' does not exist (this server serves '" + ctx.model_name + "')",
                 "invalid_request_error", "model", "model_not_found")));
    return;
  }
  out->send(json_response(model_json(ctx)));
}

void handle_tokenize(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out) {
  guarded(ctx, out, [&]() {
    const json body = parse_json_body(req.body);
    check_model(ctx, body);
    const Tokenizer& tok = ready_engine(ctx).tokenizer();
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      const json messages = normalize_messages(body["messages"]);
      bool add_generation_prompt = true;
      if (body.contains("add_generation_prompt")) {
        if (!body["add_generation_prompt"].is_boolean()) {
          throw bad_request("'add_generation_prompt' must be a boolean", "add_generation_prompt",
                            "invalid_type");
        }
        add_generation_prompt = body["add_generation_prompt"].get<bool>();
      }
      // With tools, the prompt a chat request with this body would get (their description, a call's opening).
      const ToolPrompt tp = chat_template_inputs(body, messages, parse_tool_request(body), tok);
      try {
        ids = encode_chat_prompt(tok, tp.messages, add_generation_prompt, tp.variables,
                                 add_generation_prompt ? tp.prefill : "");
      } catch (const Error& e) {
        throw bad_request(std::string("cannot render the chat: ") + e.what(), "messages", "invalid_value");
      }
    } else if (body.contains("prompt")) {
      if (!body["prompt"].is_string())
        throw bad_request("'prompt' must be a string", "prompt", "invalid_type");
      bool add_special = true;
      if (body.contains("add_special_tokens")) {
        if (!body["add_special_tokens"].is_boolean()) {
          throw bad_request("'add_special_tokens' must be a boolean", "add_special_tokens", "invalid_type");
        }
        add_special = body["add_special_tokens"].get<bool>();
      }
      try {
        ids = tok.encode(body["prompt"].get<std::string>(), add_special);
      } catch (const Error& e) {
        throw bad_request(std::string("invalid prompt: ") + e.what(), "prompt", "invalid_value");
      }
    } else {
      throw bad_request("'prompt' or 'messages' is required", "prompt", "missing_required_parameter");
    }
    out->send(
        json_response({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.limits.max_model_len}}));
  });
}

void handle_detokenize(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out) {
  guarded(ctx, out, [&]() {
    const json body = parse_json_body(req.body);
    check_model(ctx, body);
    const Tokenizer& tok = ready_engine(ctx).tokenizer();
    if (!body.contains("tokens"))
      throw bad_request("'tokens' is required", "tokens", "missing_required_parameter");
    if (!body["tokens"].is_array())
      throw bad_request("'tokens' must be a list of integers", "tokens", "invalid_type");
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer())
        throw bad_request("'tokens' must be a list of integers", "tokens", "invalid_type");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= ctx.limits.vocab_size) {
        throw bad_request(str_cat("token id ", id, " is outside [0, ", ctx.limits.vocab_size, ")"), "tokens",
                          "invalid_value");
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    out->send(json_response({{"prompt", tok.decode(ids)}}));
  });
}

}  // namespace dsinfer::server
