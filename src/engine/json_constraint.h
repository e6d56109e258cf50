// Constrained decoding to one JSON object (OpenAI's response_format json_object): the vocabulary as a byte
// trie walked from a JsonRecognizer state gives the tokens that may come next, as a bitmask over the model's
// vocabulary that the samplers apply (disallowed logits become -inf).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/json_recognizer.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

// The tokens of a tokenizer by their bytes, shared by every constrained request of an engine.
class TokenTrie {
 public:
  // Every token but the added ones (control markers such as EOS or <｜User｜>, never JSON text) and tokens
  // without bytes.
  explicit TokenTrie(const Tokenizer& tokenizer);

  // Sets bit t (mask[t / 32] >> (t % 32)) for every token t whose bytes `state` accepts in full; the caller
  // sizes and clears `mask`.
  void allowed(const JsonRecognizer& state, std::span<uint32_t> mask) const;
  size_t num_nodes() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t first_edge = 0, num_edges = 0;
    int32_t first_token = -1;  // tokens ending here, chained through next_token_
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  uint32_t build(std::vector<std::pair<std::string, int32_t>>& tokens, size_t lo, size_t hi, size_t depth);
  void visit(uint32_t node, const JsonRecognizer& state, std::span<uint32_t> mask) const;

  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> next_token_;  // by token id: the next token with the same bytes, -1 at the end
  // Inside a string (JsonRecognizer::in_plain_string) the allowed set is string_safe_ (tokens without '"'
  // or '\\' that a string accepts, the same in every such state) plus those of string_special_ (tokens
  // with '"' or '\\') that this state accepts: no walk of the trie.
  std::vector<uint32_t> string_safe_;
  std::vector<std::pair<int32_t, std::string>> string_special_;
};

// The allowed-token masks of recogniser states over a model's vocabulary, the last few kept.
class JsonMaskCache {
 public:
  JsonMaskCache(std::shared_ptr<const TokenTrie> trie, int32_t vocab);
  // (vocab + 31) / 32 words; valid until the next call.
  std::span<const uint32_t> allowed(const JsonRecognizer& state);
  int32_t vocab() const { return vocab_; }

 private:
  struct Cached {
    JsonRecognizer state;
    std::vector<uint32_t> mask;
  };
  static constexpr size_t kEntries = 16;
  std::shared_ptr<const TokenTrie> trie_;
  int32_t vocab_;
  std::vector<Cached> cache_;  // most recently used last
};

// One request's constraint to one JSON object: its recogniser state and the allowed tokens for it.
class JsonConstraint {
 public:
  // vocab: the model's (logits) vocabulary; eos_ids: the tokens that end the answer, allowed once (and only
  // once) the object is complete.
  JsonConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer, int32_t vocab,
                 std::vector<int32_t> eos_ids);

  // The allowed next tokens: (vocab + 31) / 32 words. Valid until the next advance().
  std::span<const uint32_t> allowed();
  // Moves past a sampled token; throws when the token was not allowed (an EOS token changes nothing).
  void advance(int32_t token);
  bool complete() const { return state_.complete(); }

 private:
  JsonMaskCache masks_;
  Tokenizer tokenizer_;
  std::vector<int32_t> eos_ids_;
  JsonRecognizer state_;
  std::vector<uint32_t> eos_mask_;
};

// DeepSeek-V3 tool calls with JSON arguments: the answer is free text, except that after a call's opening
// (<｜tool▁call▁begin｜>) and its arguments' fence ("```json\n") the tokens must form one JSON object; once
// it is complete the text is free again (the fence's end, the next call).
class ToolArgumentsConstraint {
 public:
  // Where the prompt leaves the answer: in free text, inside a call before its arguments (tool_choice
  // "required"), or at the arguments (a named function).
  enum class Start { kFree, kInCall, kArguments };
  static constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  static constexpr std::string_view kFence = "```json\n";

  ToolArgumentsConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer, int32_t vocab,
                          Start start);
  // The allowed next tokens, or an empty span when the text is free.
  std::span<const uint32_t> allowed();
  // Moves past a sampled token (a token that breaks the arguments frees the text: never throws).
  void advance(int32_t token);
  bool in_arguments() const { return state_ == State::kArguments; }

 private:
  enum class State { kFree, kInCall, kArguments };
  void take(std::string_view bytes);

  JsonMaskCache masks_;
  Tokenizer tokenizer_;
  State state_;
  std::string tail_;     // the free text's last bytes: markers split across tokens
  JsonRecognizer json_;  // the arguments (free_after: a token may close the object and go on)
};

}  // namespace dsinfer
