// JsonRegex: a JSON Schema `pattern` (ECMA-262 syntax, a subset) or a string `format` compiled to a DFA over
// characters, for constrained decoding of strings: ASCII characters are symbols 0-127 and every non-ASCII
// character is symbol 128 (patterns may match them only through `.`, negated classes and \D \W \S).
//
// Supported: literals, `.`, classes `[a-z0-9_]` / `[^...]`, \d \D \w \W \s \S, escaped punctuation, \n \r \t,
// groups `(...)` and `(?:...)`, alternation `|`, quantifiers `*` `+` `?` `{n}` `{n,}` `{n,m}` (bounds <= 64),
// anchors `^` at the start and `$` at the end (without them the pattern may match anywhere, as JSON Schema
// says). Refused with an error: backreferences, lookaround, lazy quantifiers, \b, \p{...}, non-ASCII
// literals. The DFA keeps only live states (from which an accepting one is reachable): a string never reaches
// a dead end.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

class JsonRegex {
 public:
  static constexpr int kSymbols = 129;  // ASCII + "any non-ASCII character"
  static constexpr uint16_t kDead = 0xFFFF;
  static constexpr size_t kMaxStates = 2048;

  // Throws dsinfer::Error naming what is not supported.
  static JsonRegex compile(std::string_view pattern);
  // The regex of a string format (date, time, date-time, uuid, ipv4), or false when the format is not one
  // the decoder enforces.
  static bool format(std::string_view name, JsonRegex& out);

  static int symbol(uint8_t ascii_or_lead_byte) {
    return ascii_or_lead_byte < 0x80 ? ascii_or_lead_byte : 128;
  }
  uint16_t start() const { return start_; }
  uint16_t next(uint16_t state, int symbol) const { return next_[state][static_cast<size_t>(symbol)]; }
  bool accepting(uint16_t state) const { return accept_[state]; }
  // Every printable ASCII character and every non-ASCII one keeps the DFA in this state (".*" reached): any
  // string text fits here, so the masks may use the precomputed string set instead of walking the trie.
  bool universal(uint16_t state) const { return universal_[state]; }
  size_t num_states() const { return next_.size(); }

 private:
  std::vector<std::array<uint16_t, kSymbols>> next_;
  std::vector<bool> accept_;
  std::vector<bool> universal_;
  uint16_t start_ = 0;
  friend class JsonRegexBuilder;
};

}  // namespace dsinfer
