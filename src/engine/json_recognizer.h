// JsonRecognizer: a byte-at-a-time pushdown recogniser of one JSON value (RFC 8259) for constrained
// decoding: feed() says whether a byte can continue a valid prefix. Its whole state is a small trivially
// copyable struct, so a search over a vocabulary copies it per step instead of undoing moves.
//
// Beyond RFC 8259, for generation: nesting is at most kMaxDepth containers deep, a run of whitespace outside
// strings at most kMaxWhitespaceRun bytes (a model cannot loop on newlines), nothing at all may follow the
// top-level value (unless free_after), and strings must be well-formed UTF-8 (no overlong forms or
// surrogates).
#pragma once
#include <climits>
#include <cstdint>
#include <string_view>

#include "engine/json_lexer.h"

namespace dsinfer {

class JsonRecognizer {
 public:
  static constexpr int kMaxDepth = 48;  // <= 64: the stack is a bit set
  static constexpr int kMaxWhitespaceRun = 48;

  // object_only: the top-level value must be an object (OpenAI's json_object mode). free_after: once the
  // top-level value is complete any bytes may follow (they are not JSON's: the value is embedded in text).
  explicit JsonRecognizer(bool object_only = true, bool free_after = false);

  // Moves past `byte` and returns true when it continues a valid prefix; returns false and leaves the state
  // as it was otherwise.
  bool feed(uint8_t byte);
  // feed() of every byte; false (state unspecified) at the first one that does not fit.
  bool feed(std::string_view bytes);
  // feed() without keeping the state on a refusal (it is unspecified then): for callers that work on a copy.
  bool feed_or_spoil(uint8_t byte) { return step(byte); }
  // A whole top-level value has been read.
  bool complete() const;
  // Inside a string between characters. Every such state accepts the same byte strings without '"' and '\\'
  // (string content is not state).
  bool in_plain_string() const { return s_.mode == kString && s_.utf8.left == 0; }
  // How many more characters the plain string may take (no bound here: INT32_MAX); -1 elsewhere.
  int32_t string_budget() const { return in_plain_string() ? INT32_MAX : -1; }

  // Equal states accept the same continuations (the key of a cache of allowed-token sets).
  bool operator==(const JsonRecognizer& other) const;

 private:
  enum Mode : uint8_t {
    kValue,       // a value is expected
    kOpenArray,   // right after '[': a value or ']'
    kOpenObject,  // right after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kColon,       // after a key
    kAfterValue,  // after a value: ',' or the container's end (at depth 0: the end)
    kString,      // inside a string (key or value)
    kEscape,      // after '\' in a string
    kUnicode,     // \u: `count` hex digits read so far
    kNumber,      // inside a number: `count` is its NumberPhase
    kLiteral,     // inside true / false / null: `literal` and `count` (bytes matched)
  };

  bool step(uint8_t byte);
  bool value_start(uint8_t byte);
  bool end_container(uint8_t byte);
  bool whitespace(uint8_t byte);
  bool string_byte(uint8_t byte);
  bool number_byte(uint8_t byte);

  // The state; everything here is compared (the mask cache's key).
  struct State {
    uint8_t mode = kValue;
    uint8_t count = 0;    // per mode: hex digits, number phase (json_lex::NumberPhase), literal bytes matched
    uint8_t literal = 0;  // 0 true, 1 false, 2 null
    uint8_t string_key = 0;    // the string being read is an object key
    json_lex::Utf8State utf8;  // in a string: UTF-8 continuation bytes due and their allowed range
    uint8_t whitespace = 0;    // the current run outside strings
    uint8_t object_only = 1;
    uint8_t depth = 0;
    uint8_t free_after = 0;
    uint8_t pad[5] = {};   // explicit, so that no padding byte escapes memcmp
    uint64_t objects = 0;  // bit d: the container at depth d is an object (else an array); 0 above depth
  } s_;
  static_assert(sizeof(State) == 24, "State has no implicit padding (compared with memcmp)");
};

}  // namespace dsinfer
