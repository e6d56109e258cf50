// OpenAI response shapes: text_completion / chat.completion bodies and their stream chunks.
#include "server/openai_response.h"

namespace dsinfer::server {

using nlohmann::json;

namespace {

json finish(const std::string& reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  try {
    return tok.decode({id});
  } catch (const std::exception&) {
    return "";
  }
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
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
                   size_t offset) {
  if (top < 0) return nullptr;
  if (chat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string text = token_text(tok, lp.token);
      json alts = json::array();
      for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < top; ++i) {
        const std::string t = token_text(tok, lp.top[i].first);
        alts.push_back({{"token", t}, {"logprob", lp.top[i].second}, {"bytes", bytes_of(t)}});
      }
      content.push_back(
          {{"token", text}, {"logprob", lp.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", alts}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string text = token_text(tok, lp.token);
    tokens.push_back(text);
    token_logprobs.push_back(lp.logprob);
    json alts = json::object();
    for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < top; ++i) {
      alts[token_text(tok, lp.top[i].first)] = lp.top[i].second;
    }
    top_logprobs.push_back(alts);
    text_offset.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", text_offset}};
}

json completion_body(const ResponseHeader& h, const Tokenizer& tok, const std::vector<ChoiceOutput>& choices,
                     int32_t top_logprobs, const json& usage) {
  json out_choices = json::array();
  for (const ChoiceOutput& c : choices) {
    json choice = {{"index", c.index}};
    if (h.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_json(tok, c.logprobs, top_logprobs, h.chat);
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
    choice["delta"] = d;
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] = delta.logprobs.empty()
                           ? json(nullptr)
                           : logprobs_json(tok, delta.logprobs, top_logprobs, h.chat, text_offset);
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
