// JsonSchemaRecognizer: a byte-at-a-time recogniser of one JSON value that also follows a compiled
// JsonSchema (response_format json_schema): feed() says whether a byte can continue a prefix of a value
// the schema accepts. Like JsonRecognizer its state is a trivially copyable struct (the vocabulary walk
// copies it per trie edge) compared with memcmp (the mask cache's key).
//
// Guarantees for generation: every accepted prefix can still be completed (no dead ends: containers open
// only where the schema's required nesting still fits in JsonSchema::kMaxDepth levels, a key or ',' only
// where a property can follow), whitespace runs outside strings are at most kMaxWhitespaceRun bytes, and
// nothing follows the value (unless free_after).
#pragma once
#include <climits>
#include <cstdint>
#include <string_view>

#include "engine/json_lexer.h"
#include "engine/json_schema.h"

namespace dsinfer {

class JsonSchemaRecognizer {
 public:
  static constexpr int kMaxDepth = JsonSchema::kMaxDepth;
  static constexpr int kMaxWhitespaceRun = 48;

  // `schema` must outlive the recogniser and its copies. free_after: once the value is complete any bytes may
  // follow (the value is embedded in text, e.g. a tool call's arguments).
  explicit JsonSchemaRecognizer(const JsonSchema* schema, bool free_after = false);

  // Moves past `byte` and returns true when it continues an accepted prefix; false and unchanged otherwise.
  bool feed(uint8_t byte);
  // feed() of every byte; false (state unspecified) at the first one that does not fit.
  bool feed(std::string_view bytes);
  // feed() without restoring the state on a refusal: for callers working on a copy.
  bool feed_or_spoil(uint8_t byte) { return step(byte); }
  // A whole value has been read (a number or literal may still go on: "1" then "12").
  bool complete() const;
  // Inside a string between characters: every such state accepts the same strings without '"' and '\\'.
  bool in_plain_string() const { return s_.mode == kString && s_.utf8.left == 0; }
  // In a plain string: how many more characters it may take (INT32_MAX when unbounded); -1 elsewhere.
  int32_t string_budget() const;

  bool operator==(const JsonSchemaRecognizer& other) const;

 private:
  enum Mode : uint8_t {
    kValue,       // a value of node `value` is expected
    kOpenArray,   // right after '['
    kOpenObject,  // right after '{'
    kKey,         // after ',' in an object
    kColon,       // after a key (`value`: the value's node)
    kAfterValue,  // after a value
    kString,      // inside a string (a value of node `value`, or a free key)
    kEscape,      // after '\'
    kUnicode,     // after \u: `count` hex digits read
    kNumber,      // inside a number of node `value`: `count` is its json_lex::NumberPhase
    kLiteral,     // inside a literal value: trie node `literal`
    kKeyLiteral,  // inside a listed property's key: trie node `literal`
  };
  struct Frame {
    uint16_t node = 0;      // the container's schema node
    uint16_t progress = 0;  // objects: index of the next property that may come; arrays: items so far
  };

  bool step(uint8_t byte);
  bool between(uint8_t byte);
  bool value_start(uint16_t node, uint8_t byte);
  bool fits(uint16_t node) const;
  void finish_value();
  bool close(uint8_t byte);
  bool key_start();
  bool key_allowed(const Frame& f, uint16_t k) const;
  bool key_reachable(const Frame& f, uint16_t trie_node) const;
  bool string_byte(uint8_t byte);
  bool count_char(uint8_t byte);
  bool pattern_char(int symbol);
  bool bounded() const;
  bool integer_part_in_range() const;
  bool bounded_digit(int64_t digit, bool negative);
  bool bounded_number_byte(uint8_t byte);
  bool decimal_bounded() const;
  bool at_low(const JsonSchema::Magnitudes& m) const;
  bool at_high(const JsonSchema::Magnitudes& m) const;
  bool magnitude_digit(int64_t digit);
  bool fraction_digit(int digit);
  bool decimal_can_end() const;
  bool decimal_number_byte(uint8_t byte);
  bool literal_byte(uint8_t byte);
  bool key_byte(uint8_t byte);
  Frame& top() { return s_.frames[s_.depth - 1]; }
  const Frame& top() const { return s_.frames[s_.depth - 1]; }

  const JsonSchema* schema_;
  struct State {
    uint8_t mode = kValue;
    uint8_t count = 0;  // hex digits or number phase
    uint8_t depth = 0;  // open containers (frames in use; those above are zero)
    uint8_t whitespace = 0;
    uint8_t string_key = 0;    // the string is a free key (an object without listed properties)
    json_lex::Utf8State utf8;  // in a string: UTF-8 continuation bytes due and their allowed range
    uint16_t value = 0;        // the node of the value expected or being read
    uint16_t literal = 0;      // trie node in a literal or key
    uint8_t free_after = 0;
    // In a \u escape of a length-bounded string: it began with 'd'. In a bounded number: it is negative.
    uint8_t flag = 0;
    // Characters so far in a length-bounded string; in a number with decimal bounds, its fraction's state.
    uint16_t chars = 0;
    int64_t number =
        0;  // a bounded integer's value so far, signed; a bounded number's magnitude's whole part
    Frame frames[kMaxDepth] = {};
  } s_;
  static_assert(sizeof(State) == 24 + 4 * kMaxDepth, "State has no implicit padding (compared with memcmp)");
};

}  // namespace dsinfer
