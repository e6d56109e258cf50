// OpenAI request parsing: typed field readers, prompt forms, chat messages, sampling fields, context checks.
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "engine/prompt.h"
#include "model/json_fields.h"
#include "server/api_error.h"
#include "server/json_depth.h"
#include "server/response_format.h"

namespace dsinfer::server {

using nlohmann::json;

namespace {

using json_fields::present;

std::optional<double> number(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number()) throw bad_request(std::string("'") + key + "' must be a number", key, "invalid_type");
  return v.get<double>();
}

std::optional<int64_t> integer(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  const json& v = body[key];
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw bad_request(std::string("'") + key + "' is too large", key, "invalid_value");
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  throw bad_request(std::string("'") + key + "' must be an integer", key, "invalid_type");
}

std::optional<bool> boolean(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  if (!body[key].is_boolean())
    throw bad_request(std::string("'") + key + "' must be a boolean", key, "invalid_type");
  return body[key].get<bool>();
}

std::optional<std::string> string(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  if (!body[key].is_string())
    throw bad_request(std::string("'") + key + "' must be a string", key, "invalid_type");
  return body[key].get<std::string>();
}

float as_float(std::optional<double> v, float fallback) {
  return v ? static_cast<float>(*v) : fallback;
}

int32_t bounded_int(int64_t v, const char* key) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    throw bad_request(std::string("'") + key + "' is out of range", key, "invalid_value");
  }
  return static_cast<int32_t>(v);
}

std::vector<int32_t> token_list(const json& list, int32_t vocab_size, const char* what) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& t : list) {
    if (!t.is_number_integer())
      throw bad_request(std::string(what) + " must contain integers", "prompt", "invalid_type");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab_size) {
      throw bad_request(str_cat(what, " contains token id ", id, ", outside [0, ", vocab_size, ")"), "prompt",
                        "invalid_value");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> encode_prompt_text(const Tokenizer& tok, const std::string& text) {
  try {
    return encode_text_prompt(tok, text);
  } catch (const Error& e) {
    throw bad_request(std::string("invalid prompt: ") + e.what(), "prompt", "invalid_value");
  }
}

// DeepSeek's fill-in-the-middle tokens (DeepSeek-Coder, V2, V3 tokenizers).
constexpr const char* kFimBegin = "<｜fim▁begin｜>";
constexpr const char* kFimHole = "<｜fim▁hole｜>";
constexpr const char* kFimEnd = "<｜fim▁end｜>";

// The text a completion prompt is encoded from: with a suffix, DeepSeek's fill-in-the-middle layout
// (prefix, hole, suffix: the model writes what goes in the hole).
std::string prompt_text(const Tokenizer& tok, const std::string& prompt, const std::string& suffix) {
  if (suffix.empty()) return prompt;
  for (const char* marker : {kFimBegin, kFimHole, kFimEnd}) {
    if (!tok.token_to_id(marker)) {
      throw bad_request(str_cat("'suffix': this model's tokenizer has no ", marker,
                                " token (no fill-in-the-middle training)"),
                        "suffix", "unsupported_parameter");
    }
  }
  return str_cat(kFimBegin, prompt, kFimHole, suffix, kFimEnd);
}

std::vector<std::vector<int32_t>> completion_prompts(const json& body, const Tokenizer& tok, int32_t vocab,
                                                     std::vector<std::string>& texts) {
  if (!present(body, "prompt"))
    throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  const json& p = body["prompt"];
  const std::string suffix = string(body, "suffix").value_or("");
  std::vector<std::vector<int32_t>> prompts;
  if (p.is_string()) {
    texts.push_back(p.get<std::string>());
    prompts.push_back(encode_prompt_text(tok, prompt_text(tok, texts.back(), suffix)));
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (const json& s : p) {
      if (!s.is_string())
        throw bad_request("'prompt' list entries must all be strings", "prompt", "invalid_type");
      texts.push_back(s.get<std::string>());
      prompts.push_back(encode_prompt_text(tok, prompt_text(tok, texts.back(), suffix)));
    }
  } else if (!suffix.empty()) {
    throw bad_request("'suffix' needs the prompt as text (token-id prompts cannot be laid out around a hole)",
                      "suffix", "invalid_value");
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    for (const json& ids : p) {
      if (!ids.is_array())
        throw bad_request("'prompt' lists of token ids must all be lists", "prompt", "invalid_type");
      prompts.push_back(token_list(ids, vocab, "'prompt' token list"));
    }
  } else if (p.is_array() && !p.empty()) {
    prompts.push_back(token_list(p, vocab, "'prompt'"));
  } else {
    throw bad_request(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists",
        "prompt", "invalid_type");
  }
  for (const auto& ids : prompts) {
    if (ids.empty()) throw bad_request("'prompt' must not be empty", "prompt", "invalid_value");
  }
  if (texts.empty()) {
    for (const auto& ids : prompts) texts.push_back(tok.decode(ids));  // token-id prompts
  }
  if (prompts.size() > static_cast<size_t>(kMaxChoices)) {
    throw bad_request(str_cat("at most ", kMaxChoices, " prompts per request"), "prompt", "invalid_value");
  }
  return prompts;
}

// A list field's length bounded before anything is copied from it (400 invalid_value naming the field).
void at_most(const json& list, size_t most, const std::string& field) {
  if (list.size() > most) {
    throw bad_request(str_cat("'", field, "' has ", list.size(), " entries; at most ", most, " are allowed"),
                      field, "invalid_value");
  }
}

// `stop`: a string or a list of strings, bounded in count and length before anything is copied.
std::vector<std::string> stop_strings(const json& stop) {
  if (stop.is_string()) return stop_strings(json::array({stop}));
  if (!stop.is_array())
    throw bad_request("'stop' must be a string or a list of strings", "stop", "invalid_type");
  at_most(stop, SamplingParams::kMaxStopStrings, "stop");
  std::vector<std::string> out;
  for (const json& e : stop) {
    if (!e.is_string()) throw bad_request("'stop' entries must be strings", "stop", "invalid_type");
    const std::string& text = e.get_ref<const std::string&>();
    if (text.size() > SamplingParams::kMaxStopStringBytes) {
      throw bad_request(str_cat("'stop' strings must be at most ", SamplingParams::kMaxStopStringBytes,
                                " bytes, got one of ", text.size()),
                        "stop", "invalid_value");
    }
    out.push_back(text);
  }
  return out;
}

// `stop_token_ids` (vLLM): a bounded list of ids of the vocabulary (checked before narrowing to int32).
std::vector<int32_t> stop_token_ids(const json& ids, int32_t vocab_size) {
  if (!ids.is_array())
    throw bad_request("'stop_token_ids' must be a list of integers", "stop_token_ids", "invalid_type");
  at_most(ids, SamplingParams::kMaxStopTokenIds, "stop_token_ids");
  std::vector<int32_t> out;
  for (const json& e : ids) {
    if (!e.is_number_integer())
      throw bad_request("'stop_token_ids' must be a list of integers", "stop_token_ids", "invalid_type");
    const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                                 : e.get<int64_t>() >= 0 && e.get<int64_t>() < vocab_size;
    if (!in_range) {
      throw bad_request(str_cat("'stop_token_ids' contains ", e.dump(), ", outside [0, ", vocab_size, ")"),
                        "stop_token_ids", "invalid_value");
    }
    out.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return out;
}

// `logit_bias`: {"token id": bias in [-100, 100]} into parallel id / value lists, ordered by id.
void read_logit_bias(const json& bias, int32_t vocab_size, SamplingParams& s) {
  if (!bias.is_object())
    throw bad_request("'logit_bias' must be an object of {\"token id\": bias}", "logit_bias", "invalid_type");
  if (bias.size() > SamplingParams::kMaxLogitBias) {
    throw bad_request(str_cat("'logit_bias' may hold at most ", SamplingParams::kMaxLogitBias, " tokens"),
                      "logit_bias", "invalid_value");
  }
  std::vector<std::pair<int32_t, float>> entries;
  for (auto it = bias.begin(); it != bias.end(); ++it) {
    const std::string& key = it.key();
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab_size) {
      throw bad_request(
          str_cat("'logit_bias' keys must be token ids in [0, ", vocab_size, "), got \"", key, "\""),
          "logit_bias", "invalid_value");
    }
    if (!it.value().is_number()) {
      throw bad_request(str_cat("'logit_bias' of token ", key, " must be a number"), "logit_bias",
                        "invalid_type");
    }
    const double v = it.value().get<double>();
    if (!(v >= -SamplingParams::kMaxLogitBiasValue && v <= SamplingParams::kMaxLogitBiasValue)) {
      throw bad_request(
          str_cat("'logit_bias' of token ", key, " must be in [-100, 100], got ", it.value().dump()),
          "logit_bias", "invalid_value");
    }
    entries.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
  }
  std::sort(entries.begin(), entries.end());
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].first == entries[i - 1].first) {  // "7" and "07"
      throw bad_request(str_cat("'logit_bias' names token ", entries[i].first, " twice"), "logit_bias",
                        "invalid_value");
    }
  }
  for (const auto& [id, v] : entries) {
    s.logit_bias_ids.push_back(id);
    s.logit_bias_values.push_back(v);
  }
}

// Completions' `best_of` (after n, stream and logprobs are read): candidates per prompt, at least n; more
// than n need each token's logprob (to rank them) and cannot be streamed (the best are known at the end).
void read_best_of(const json& body, CompletionRequest& r) {
  const std::optional<int64_t> best_of = integer(body, "best_of");
  if (!best_of || *best_of == r.n) return;
  if (*best_of < 1 || *best_of > kMaxChoices)
    throw bad_request(str_cat("'best_of' must be in [1, ", kMaxChoices, "]"), "best_of", "invalid_value");
  if (*best_of < r.n) {
    throw bad_request(str_cat("'best_of' (", *best_of, ") must be at least 'n' (", r.n, ")"), "best_of",
                      "invalid_value");
  }
  if (r.stream) {
    throw bad_request(
        "'best_of' greater than 'n' cannot be streamed (the best candidates are known only at the end)",
        "best_of", "invalid_value");
  }
  if (r.prompts.size() * static_cast<size_t>(*best_of) > static_cast<size_t>(kMaxChoices)) {
    throw bad_request(str_cat("prompts x best_of must be at most ", kMaxChoices), "best_of", "invalid_value");
  }
  r.best_of = static_cast<int32_t>(*best_of);
  r.sampling.logprobs = std::max<int32_t>(1, r.sampling.logprobs);  // each token's logprob, to rank them
}

// "sampling: top_p must be ..." -> "top_p".
std::string field_of(const std::string& message) {
  const std::string prefix = "sampling: ";
  if (message.rfind(prefix, 0) != 0) return "";
  const size_t end = message.find_first_of(" [", prefix.size());
  return message.substr(prefix.size(), end - prefix.size());
}

// OpenAI features this server does not implement, asked for with a value that would change the result: a
// 400 naming the field, rather than an answer that silently lacks what was asked (their neutral values pass).
void refuse_unsupported(const json& body, bool chat) {
  auto refuse = [](const char* key, const std::string& why) {
    throw bad_request(str_cat("'", key, "' ", why), key, "unsupported_parameter");
  };
  if (!chat) {
    if (boolean(body, "echo").value_or(false)) {
      if (string(body, "suffix").value_or("") != "")
        throw bad_request("'echo' and 'suffix' cannot be combined", "echo", "invalid_value");
    }
  }
  // vLLM's prompt_logprobs extension: asked for, the answer would lack them without a word.
  if (present(body, "prompt_logprobs")) {
    refuse("prompt_logprobs",
           chat ? "(vLLM's extension) is not supported"
                : "(vLLM's extension) is not supported; 'echo': true with 'logprobs' returns "
                  "the prompt's logprobs");
  }
  if (chat) {
    const bool functions =
        present(body, "functions") && body["functions"].is_array() && !body["functions"].empty();
    if (functions && body.value("function_call", json()) != json("none"))
      refuse("functions", "(the deprecated form of 'tools') are not supported; declare them as 'tools'");
  }
}

// OpenAI content parts as one string (text parts only).
std::string flattened_parts(const json& parts, size_t i) {
  std::string text;
  for (const json& part : parts) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      throw bad_request(
          str_cat("messages[", i, "].content: only {\"type\": \"text\", \"text\": ...} parts are supported"),
          "messages", "invalid_value");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

json parse_json_body(const std::string& body) {
  if (body.empty())
    throw bad_request("the request body is empty (expected a JSON object)", "", "invalid_json");
  // Before parsing: copies and comparisons of nlohmann::json recurse per level, so a deeper body could
  // overflow the stack later on.
  if (json_deeper_than(body, kMaxJsonDepth)) {
    throw bad_request(
        str_cat("the request body nests arrays/objects more than ", kMaxJsonDepth, " levels deep"), "",
        "invalid_json");
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const bool utf8 = what.find("UTF-8") != std::string::npos || what.find("surrogate") != std::string::npos;
    throw bad_request(std::string(utf8 ? "invalid UTF-8 in the request body: " : "malformed JSON: ") + what,
                      "", utf8 ? "invalid_utf8" : "invalid_json");
  } catch (const json::exception& e) {
    // Well-formed text the parser cannot hold, e.g. a number beyond a double (1e999: out_of_range.406).
    throw bad_request(std::string("unreadable JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object", "", "invalid_json");
  return j;
}

json normalize_messages(const json& messages) {
  if (!messages.is_array()) {
    throw bad_request("'messages' must be a list of {\"role\", \"content\"} objects", "messages",
                      "invalid_type");
  }
  if (messages.empty()) throw bad_request("'messages' must not be empty", "messages", "invalid_value");
  json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    json& m = out[i];
    // OpenAI's "developer" role is its newer name for "system"; chat templates know only the latter.
    if (m.is_object() && m.value("role", json()) == "developer") m["role"] = "system";
    if (!m.is_object()) continue;
    if (m.contains("content") && m["content"].is_array()) m["content"] = flattened_parts(m["content"], i);
    normalize_tool_message(m, i);
  }
  try {
    validate_messages(out);
  } catch (const Error& e) {
    throw bad_request(e.what(), "messages", "invalid_value");
  }
  return out;
}

ToolPrompt chat_template_inputs(const json& body, const json& messages, const ToolRequest& tools,
                                const Tokenizer& tok) {
  ToolPrompt p = tool_prompt(tools, messages, tok);
  if (!present(body, "chat_template_kwargs")) return p;
  const json& kwargs = body["chat_template_kwargs"];
  if (!kwargs.is_object()) {
    throw bad_request("'chat_template_kwargs' must be an object of template variables",
                      "chat_template_kwargs", "invalid_type");
  }
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    // What the server itself gives the template is not overridden.
    for (const char* reserved :
         {"messages", "add_generation_prompt", "tools", "documents", "bos_token", "eos_token"}) {
      if (it.key() == reserved) {
        throw bad_request(str_cat("'chat_template_kwargs' may not set '", reserved, "'"),
                          "chat_template_kwargs", "invalid_value");
      }
    }
    p.variables[it.key()] = it.value();
  }
  return p;
}

CompletionRequest parse_completion_request(const json& body, bool chat, const Tokenizer& tok,
                                           const ModelLimits& limits, std::string_view raw_body) {
  refuse_unsupported(body, chat);
  OrderedBody ordered(raw_body);  // the schemas' key order, parsed once if a schema is read
  CompletionRequest r;
  r.chat = chat;
  r.model = string(body, "model").value_or("");
  if (chat) {
    if (!present(body, "messages"))
      throw bad_request("'messages' is required", "messages", "missing_required_parameter");
    const json messages = normalize_messages(body["messages"]);
    r.tools = parse_tool_request(body);
    const ToolPrompt tp = chat_template_inputs(body, messages, r.tools, tok);
    r.tool_prefill = tp.prefill;
    if (r.tools.active()) {
      r.sampling.json_tool_arguments = true;  // the arguments are held to JSON objects, or their schemas
      r.sampling.tool_arguments_start = tp.arguments_start;
      r.sampling.tool_schemas = tool_parameter_schemas(r.tools, ordered);
      r.sampling.tool_arguments_function = r.tools.forced_name;
      r.sampling.tool_arguments_bare = !tp.v3_layout;
    }
    try {
      r.prompts.push_back(encode_chat_prompt(tok, tp.messages, true, tp.variables, tp.prefill));
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw bad_request(std::string("cannot render the chat: ") + e.what(), "messages", "invalid_value");
    }
  } else {
    std::vector<std::string> texts;
    r.prompts = completion_prompts(body, tok, limits.vocab_size, texts);
    if (boolean(body, "echo").value_or(false)) r.echo_texts = std::move(texts);
  }

  SamplingParams& s = r.sampling;
  s.temperature = as_float(number(body, "temperature"), 1.0f);
  s.top_p = as_float(number(body, "top_p"), 1.0f);
  s.min_p = as_float(number(body, "min_p"), 0.0f);
  s.presence_penalty = as_float(number(body, "presence_penalty"), 0.0f);
  s.frequency_penalty = as_float(number(body, "frequency_penalty"), 0.0f);
  s.repetition_penalty = as_float(number(body, "repetition_penalty"), 1.0f);
  if (auto k = integer(body, "top_k")) s.top_k = bounded_int(*k, "top_k");
  if (auto seed = integer(body, "seed")) s.seed = static_cast<uint64_t>(*seed);
  if (auto ignore = boolean(body, "ignore_eos")) s.ignore_eos = *ignore;
  if (present(body, "stop")) s.stop = stop_strings(body["stop"]);
  if (present(body, "stop_token_ids"))
    s.stop_token_ids = stop_token_ids(body["stop_token_ids"], limits.vocab_size);
  if (present(body, "logit_bias")) read_logit_bias(body["logit_bias"], limits.vocab_size, s);
  if (const ResponseFormat format = parse_response_format(body, ordered); format.json) {
    const char* type = format.schema ? "json_schema" : "json_object";
    if (r.tools.active()) {
      throw bad_request(str_cat("'response_format' ", type,
                                " cannot be combined with tools (set \"tool_choice\": \"none\")"),
                        "response_format", "invalid_value");
    }
    if (s.ignore_eos) {
      throw bad_request(str_cat("'response_format' ", type, " cannot be combined with 'ignore_eos'"),
                        "response_format", "invalid_value");
    }
    s.json_object = true;
    s.json_schema = format.schema;
  }

  // logprobs: completions take an integer (alternatives per token); chat a boolean plus top_logprobs.
  if (chat) {
    const bool want = boolean(body, "logprobs").value_or(false);
    auto top = integer(body, "top_logprobs");
    if (top && (*top < 0 || *top > SamplingParams::kMaxLogprobs)) {
      throw bad_request(str_cat("'top_logprobs' must be in [0, ", SamplingParams::kMaxLogprobs, "]"),
                        "top_logprobs", "invalid_value");
    }
    if (top && !want)
      throw bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs", "invalid_value");
    if (want) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else if (auto lp = integer(body, "logprobs")) {
    if (*lp < 0 || *lp > SamplingParams::kMaxLogprobs) {
      throw bad_request(str_cat("'logprobs' must be in [0, ", SamplingParams::kMaxLogprobs, "]"), "logprobs",
                        "invalid_value");
    }
    r.top_logprobs = static_cast<int32_t>(*lp);
  }
  // The engine returns the sampled token's logprob only when at least one alternative is asked for.
  if (r.top_logprobs >= 0) s.logprobs = std::max<int32_t>(1, r.top_logprobs);
  // echo with logprobs: the echoed prompt's tokens are scored too (the first has none: null).
  const bool echo_scores = !chat && !r.echo_texts.empty() && r.top_logprobs >= 0;
  if (echo_scores) s.prompt_logprobs = r.top_logprobs;

  if (auto n = integer(body, "n")) {
    if (*n < 1 || *n > kMaxChoices)
      throw bad_request(str_cat("'n' must be in [1, ", kMaxChoices, "]"), "n", "invalid_value");
    r.n = static_cast<int32_t>(*n);
  }
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxChoices)) {
    throw bad_request(str_cat("prompts x n must be at most ", kMaxChoices), "n", "invalid_value");
  }
  r.stream = boolean(body, "stream").value_or(false);
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object())
      throw bad_request("'stream_options' must be an object", "stream_options", "invalid_type");
    r.include_usage = boolean(so, "include_usage").value_or(false);
  }
  r.user = string(body, "user").value_or("");
  if (!chat) read_best_of(body, r);

  // max_tokens (max_completion_tokens wins for chat): default 16 for completions, the rest of the context
  // for chat.
  const char* max_key =
      chat && present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  std::optional<int64_t> max_tokens = integer(body, max_key);
  // 0 scores the prompt and generates nothing (echo with logprobs: the prompt's loglikelihood).
  if (max_tokens && *max_tokens < (echo_scores ? 0 : 1)) {
    throw bad_request(echo_scores
                          ? str_cat("'", max_key, "' must be >= 0")
                          : str_cat("'", max_key, "' must be >= 1 (0 only with 'echo' and 'logprobs')"),
                      max_key, "invalid_value");
  }
  size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  const int64_t room = limits.max_model_len - static_cast<int64_t>(longest);
  if (room < (max_tokens && *max_tokens == 0 ? 0 : 1)) {  // a prompt scored alone may fill the context
    throw bad_request(str_cat("This model's maximum context length is ", limits.max_model_len,
                              " tokens, but the prompt has ", longest, " tokens"),
                      chat ? "messages" : "prompt", "context_length_exceeded");
  }
  if (max_tokens && *max_tokens > room) {
    throw bad_request(str_cat("This model's maximum context length is ", limits.max_model_len,
                              " tokens. However, you requested ", longest + *max_tokens, " tokens (", longest,
                              " in the prompt, ", *max_tokens,
                              " for the completion). Please reduce the prompt or the completion length."),
                      max_key, "context_length_exceeded");
  }
  s.max_tokens = max_tokens ? static_cast<int32_t>(*max_tokens)
                            : static_cast<int32_t>(chat ? room : std::min<int64_t>(16, room));

  try {
    s.validate(limits.vocab_size);
  } catch (const Error& e) {
    throw bad_request(e.what(), field_of(e.what()), "invalid_value");
  }
  return r;
}

}  // namespace dsinfer::server
