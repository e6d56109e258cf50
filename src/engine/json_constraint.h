// Constrained decoding to JSON (OpenAI's response_format json_object and json_schema): the vocabulary as a
// byte trie walked from a recogniser state (JsonRecognizer, or JsonSchemaRecognizer for a schema) gives the
// tokens that may come next, as a bitmask over the model's vocabulary that the samplers apply (disallowed
// logits become -inf).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/json_recognizer.h"
#include "engine/json_schema_recognizer.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

// The tokens of a tokenizer by their bytes, shared by every constrained request of an engine.
class TokenTrie {
 public:
  // Every token but the added ones (control markers such as EOS or <｜User｜>, never JSON text) and tokens
  // without bytes.
  explicit TokenTrie(const Tokenizer& tokenizer);

  // Sets bit t (mask[t / 32] >> (t % 32)) for every token t whose bytes `state` accepts in full; the caller
  // sizes and clears `mask`. Recognizer: JsonRecognizer or JsonSchemaRecognizer.
  template <class Recognizer>
  void allowed(const Recognizer& state, std::span<uint32_t> mask) const;
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
  template <class Recognizer>
  void visit(uint32_t node, const Recognizer& state, std::span<uint32_t> mask) const;

  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> next_token_;  // by token id: the next token with the same bytes, -1 at the end
  // Inside a string (string_budget() >= 0) the allowed set is string_safe_ (tokens without '"' or '\\'
  // that a string accepts, the same in every such state) plus those of string_special_ (tokens with '"' or
  // '\\') that this state accepts: no walk of the trie. A length-bounded string with fewer characters left
  // than the longest safe token takes the safe tokens with at most that many (safe_chars_).
  std::vector<uint32_t> string_safe_;
  std::vector<uint8_t> safe_chars_;  // by token id: characters of a safe token (kNotSafe: not one)
  int32_t max_safe_chars_ = 0;
  static constexpr uint8_t kNotSafe = 255;
  // safe_upto_[c]: the safe tokens of at most c characters, for c below kUptoSets (a budget that small takes
  // a copy; a larger one below max_safe_chars_ filters safe_chars_).
  static constexpr int32_t kUptoSets = 48;
  std::vector<std::vector<uint32_t>> safe_upto_;
  std::vector<std::pair<int32_t, std::string>> string_special_;
};

// The allowed-token masks of recogniser states over a model's vocabulary, the last few kept.
template <class Recognizer>
class BasicJsonMaskCache {
 public:
  BasicJsonMaskCache(std::shared_ptr<const TokenTrie> trie, int32_t vocab);
  // (vocab + 31) / 32 words; valid until the next call.
  std::span<const uint32_t> allowed(const Recognizer& state);
  int32_t vocab() const { return vocab_; }

 private:
  struct Cached {
    Recognizer state;
    std::vector<uint32_t> mask;
  };
  static constexpr size_t kEntries = 16;
  std::shared_ptr<const TokenTrie> trie_;
  int32_t vocab_;
  std::vector<Cached> cache_;  // most recently used last
};
using JsonMaskCache = BasicJsonMaskCache<JsonRecognizer>;
using JsonSchemaMaskCache = BasicJsonMaskCache<JsonSchemaRecognizer>;

// One request's constraint to one JSON object (json_object) or one value of a schema (json_schema): its
// recogniser state and the allowed tokens for it.
class JsonConstraint {
 public:
  // vocab: the model's (logits) vocabulary; eos_ids: the tokens that end the answer, allowed once (and only
  // once) the value is complete. schema: null for any JSON object.
  JsonConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer, int32_t vocab,
                 std::vector<int32_t> eos_ids, std::shared_ptr<const JsonSchema> schema = nullptr);

  // The allowed next tokens: (vocab + 31) / 32 words. Valid until the next advance().
  std::span<const uint32_t> allowed();
  // Moves past a sampled token; throws when the token was not allowed (an EOS token changes nothing).
  void advance(int32_t token);
  bool complete() const;

 private:
  template <class Recognizer>
  struct Walk {
    BasicJsonMaskCache<Recognizer> masks;
    Recognizer state;
  };
  std::shared_ptr<const JsonSchema> schema_;  // owns what the schema walk's states point at
  std::variant<Walk<JsonRecognizer>, Walk<JsonSchemaRecognizer>> walk_;
  Tokenizer tokenizer_;
  std::vector<int32_t> eos_ids_;
  std::vector<uint32_t> eos_mask_;
  std::vector<uint32_t> eos_or_more_;  // a complete value that may still go on (a number): both
};

// DeepSeek-V3 tool calls with JSON arguments: the answer is free text, except that after a call's opening
// (<｜tool▁call▁begin｜>), its function name and its arguments' fence ("```json\n"; V3.1: the separator
// after the name) the tokens must form one
// JSON object, one of the function's parameter schema when it has one; once it is complete the text is free
// again (the fence's end, the next call).
class ToolArgumentsConstraint {
 public:
  // Where the prompt leaves the answer: in free text, inside a call before its arguments (tool_choice
  // "required"), or at the arguments (a named function).
  enum class Start { kFree, kInCall, kArguments };
  static constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";
  static constexpr std::string_view kFence = "```json\n";
  // Functions by name and their parameters compiled with JsonSchema::compile(..., object_root = true).
  using Schemas = std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>>;

  // function: at Start::kArguments, the function whose arguments come first. bare: DeepSeek-V3.1's layout
  // (<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>: the arguments follow the separator)
  // instead of V3's fenced one.
  ToolArgumentsConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer, int32_t vocab,
                          Start start, Schemas schemas = {}, std::string function = {}, bool bare = false);
  // The allowed next tokens, or an empty span when the text is free.
  std::span<const uint32_t> allowed();
  // Moves past a sampled token (a token that breaks the arguments frees the text: never throws).
  void advance(int32_t token);
  bool in_arguments() const { return state_ == State::kArguments; }
  // The current call's arguments follow its function's schema.
  bool schema_bound() const { return schema_json_.has_value(); }

 private:
  enum class State { kFree, kInCall, kArguments };
  static constexpr size_t kMaxCallText = 256;  // a call's text before its fence kept for the name
  void take(std::string_view bytes);
  void open_arguments(std::string_view function);
  bool feed_arguments(uint8_t byte);
  bool arguments_complete() const;

  JsonMaskCache masks_;
  JsonSchemaMaskCache schema_masks_;
  Tokenizer tokenizer_;
  Schemas schemas_;
  State state_;
  bool bare_;
  std::string tail_;     // the free text's last bytes (markers split across tokens); in a call, its text
  JsonRecognizer json_;  // the arguments (free_after: a token may close the object and go on)
  std::optional<JsonSchemaRecognizer> schema_json_;  // instead, when the function has a schema
};

}  // namespace dsinfer
