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

// One request's constraint: its recogniser state and the allowed tokens for it (cached per state).
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
  struct Cached {
    JsonRecognizer state;
    std::vector<uint32_t> mask;
  };
  static constexpr size_t kCacheEntries = 16;

  std::shared_ptr<const TokenTrie> trie_;
  Tokenizer tokenizer_;
  int32_t vocab_;
  std::vector<int32_t> eos_ids_;
  JsonRecognizer state_;
  std::vector<Cached> cache_;  // most recently used last
  std::vector<uint32_t> eos_mask_;
};

}  // namespace dsinfer
