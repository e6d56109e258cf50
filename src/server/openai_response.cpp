// OpenAI response shapes: text_completion / chat.completion bodies and their stream chunks.
#include "server/openai_response.h"

#include <cstdio>

#include "tokenizer/utf8.h"

namespace dsinfer::server {

using nlohmann::json;

namespace {

json finish(const std::string& reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

// The token as text: what it decodes to alone, U+FFFD for bytes of an incomplete UTF-8 character.
std::string token_text(const Tokenizer& tok, int32_t id) {
  try {
    return tok.decode({id});
  } catch (const std::exception&) {
    return "";
  }
}

// The bytes the token adds to the output (a byte-fallback token such as <0xE4>: that one byte).
std::string token_raw(const Tokenizer& tok, int32_t id) {
  try {
    return tok.token_bytes(id);
  } catch (const std::exception&) {
    return "";
  }
}

// The key of a token in the completions top_logprobs object: its text, or, when its bytes are not UTF-8 on
// their own, `bytes:\xe4\xbd` (a backslash, x, two hex digits per byte) so that two such tokens do not
// collide on "\uFFFD".
std::string top_key(const Tokenizer& tok, int32_t id) {
  const std::string raw = token_raw(tok, id);
  if (utf8::find_invalid(raw) == utf8::kValid) return token_text(tok, id);
  std::string key = "bytes:";
  char hex[8];
  for (unsigned char c : raw) {
    std::snprintf(hex, sizeof(hex), "\\x%02x", c);
    key += hex;
  }
  return key;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json tool_calls_json(const std::vector<ToolCallOutput>& calls, bool delta) {
  json out = json::array();
  for (const ToolCallOutput& c : calls) {
    json call = {
        {"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
    if (delta) call["index"] = c.index;
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int32_t top, bool chat,
                   size_t offset, size_t unscored, size_t untexted) {
  if (top < 0) return nullptr;
  if (chat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string text = token_text(tok, lp.token);
      json alts = json::array();
      for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < top; ++i) {
        const int32_t alt = lp.top[i].first;
        alts.push_back({{"token", token_text(tok, alt)},
                        {"logprob", lp.top[i].second},
                        {"bytes", bytes_of(token_raw(tok, alt))}});
      }
      content.push_back({{"token", text},
                         {"logprob", lp.logprob},
                         {"bytes", bytes_of(token_raw(tok, lp.token))},
                         {"top_logprobs", alts}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (size_t k = 0; k < lps.size(); ++k) {
    const TokenLogprob& lp = lps[k];
    tokens.push_back(token_text(tok, lp.token));
    if (k < unscored) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
    } else {
      token_logprobs.push_back(lp.logprob);
      json alts = json::object();
      for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < top; ++i) {
        const std::string key = top_key(tok, lp.top[i].first);
        if (!alts.contains(key)) alts[key] = lp.top[i].second;  // the likelier of two equal keys
      }
      top_logprobs.push_back(alts);
    }
    text_offset.push_back(offset);
    if (k >= untexted) offset += token_raw(tok, lp.token).size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", text_offset}};
}

size_t logprobs_text_bytes(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, size_t untexted) {
  size_t bytes = 0;
  for (size_t k = untexted; k < lps.size(); ++k) bytes += token_raw(tok, lps[k].token).size();
  return bytes;
}

json completion_body(const ResponseHeader& h, const Tokenizer& tok, const std::vector<ChoiceOutput>& choices,
                     int32_t top_logprobs, const json& usage) {
  json out_choices = json::array();
  for (const ChoiceOutput& c : choices) {
    json choice = {{"index", c.index}};
    if (h.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (c.reasoning) {
        choice["message"]["reasoning_content"] = c.reasoning->empty() ? json(nullptr) : json(*c.reasoning);
      }
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls, false);
      }
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_json(tok, c.logprobs, top_logprobs, h.chat, 0, c.unscored, c.untexted);
    choice["finish_reason"] = finish(c.finish_reason);
    out_choices.push_back(choice);
  }
  return {{"id", h.id},
          {"object", h.chat ? "chat.completion" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", out_choices},
          {"usage", usage}};
}

json chunk_body(const ResponseHeader& h, const Tokenizer& tok, const ChoiceOutput& delta,
                int32_t top_logprobs, bool role_delta, bool include_usage, size_t text_offset) {
  json choice = {{"index", delta.index}};
  if (h.chat) {
    json d = json::object();
    if (role_delta) d["role"] = "assistant";
    if (!delta.text.empty() || role_delta) d["content"] = delta.text;
    if (delta.reasoning && !delta.reasoning->empty()) d["reasoning_content"] = *delta.reasoning;
    if (!delta.tool_calls.empty()) d["tool_calls"] = tool_calls_json(delta.tool_calls, true);
    choice["delta"] = d;
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] = delta.logprobs.empty() ? json(nullptr)
                                              : logprobs_json(tok, delta.logprobs, top_logprobs, h.chat,
                                                              text_offset, delta.unscored, delta.untexted);
  choice["finish_reason"] = finish(delta.finish_reason);
  json chunk = {{"id", h.id},
                {"object", h.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", h.created},
                {"model", h.model},
                {"choices", json::array({choice})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const ResponseHeader& h, const json& usage) {
  return {{"id", h.id},
          {"object", h.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", json::array()},
          {"usage", usage}};
}

}  // namespace dsinfer::server
