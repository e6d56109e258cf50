// JsonSchemaRecognizer: JSON's grammar steered by a compiled schema (see the header). The lexical parts
// (strings, numbers) are json_lex's, shared with JsonRecognizer.
#include "engine/json_schema_recognizer.h"

#include <algorithm>
#include <cstring>

#include "engine/json_lexer.h"
#include "engine/json_schema_bounds.h"

namespace dsinfer {

using Kind = JsonSchema::Kind;

JsonSchemaRecognizer::JsonSchemaRecognizer(const JsonSchema* schema, bool free_after) : schema_(schema) {
  s_.value = schema->root();
  s_.free_after = free_after ? 1 : 0;
}

bool JsonSchemaRecognizer::feed(uint8_t byte) {
  const State saved = s_;
  if (step(byte)) return true;
  s_ = saved;
  return false;
}

bool JsonSchemaRecognizer::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!step(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonSchemaRecognizer::complete() const {
  if (s_.depth != 0) return false;
  switch (s_.mode) {
    case kAfterValue:
      return true;
    case kNumber:
      return json_lex::number_can_end(s_.count) && (!bounded() || integer_part_in_range()) &&
             (!decimal_bounded() || decimal_can_end());
    case kLiteral:
      return schema_->trie(s_.literal).terminal;
    default:
      return false;
  }
}

// The number being read is an integer with bounds.
bool JsonSchemaRecognizer::bounded() const {
  const JsonSchema::Node& node = schema_->node(s_.value);
  return node.kind == Kind::kInteger && node.numeric_bounded();
}

// The number being read is a number with bounds: `flag` is its side (1: written with '-'), `number` the
// integer part of its magnitude so far, `chars` its fraction digits so far (low byte, saturating) and whether
// a digit has already put it above the low bound (kAboveLow) or below the high one (kBelowHigh).
bool JsonSchemaRecognizer::decimal_bounded() const {
  const JsonSchema::Node& node = schema_->node(s_.value);
  return node.kind == Kind::kNumber && node.decimal_bounds;
}

namespace {
constexpr uint16_t kAboveLow = 0x100, kBelowHigh = 0x200;

int digit_at(const std::string& digits, uint32_t k) {
  return k < digits.size() ? digits[k] - '0' : 0;
}
}  // namespace

// The magnitude's fraction so far still equals the low (high) bound's digits, its integer part being the
// bound's: the bound is undecided.
bool JsonSchemaRecognizer::at_low(const JsonSchema::Magnitudes& m) const {
  return s_.number == m.low.whole && !(s_.chars & kAboveLow);
}
bool JsonSchemaRecognizer::at_high(const JsonSchema::Magnitudes& m) const {
  return m.has_high && s_.number == m.high.whole && !(s_.chars & kBelowHigh);
}

// An integer-part digit of a bounded number's magnitude: taken when the digits so far can still make an
// integer part that holds an allowed magnitude (with more digits or without).
bool JsonSchemaRecognizer::magnitude_digit(int64_t digit) {
  const JsonSchema::Magnitudes& m = schema_->node(s_.value).magnitudes[s_.flag];
  if (s_.number > (JsonSchema::kMaxIntegerBound - digit) / 10) return false;  // beyond 18 digits
  const int64_t magnitude = s_.number * 10 + digit;
  int64_t scale = 1;  // integer parts magnitude * 10^j + [0, 10^j) for j more digits (none after a 0)
  for (int64_t low = magnitude;; low *= 10, scale *= 10) {
    if (low + scale - 1 >= m.whole_min && low <= m.whole_max) {
      s_.number = magnitude;
      return true;
    }
    if (magnitude == 0 || low > JsonSchema::kMaxIntegerBound / 10) return false;
  }
}

// A fraction digit: not below the low bound's digit while the fraction follows it, not above the high
// bound's while it follows that one, and never the high bound's last digit when that bound is open (then
// only zeros could follow: a value equal to it, never below).
bool JsonSchemaRecognizer::fraction_digit(int digit) {
  const JsonSchema::Magnitudes& m = schema_->node(s_.value).magnitudes[s_.flag];
  const uint32_t k = s_.chars & 0xFF;
  uint16_t flags = s_.chars & (kAboveLow | kBelowHigh);
  if (at_low(m)) {
    const int bound = digit_at(m.low.frac, k);
    if (digit < bound) return false;
    if (digit > bound) flags |= kAboveLow;
  }
  if (at_high(m)) {
    const int bound = digit_at(m.high.frac, k);
    if (digit > bound) return false;
    if (digit < bound) flags |= kBelowHigh;
    if (digit == bound && m.high_open && k + 1 >= m.high.frac.size()) return false;
  }
  s_.chars = static_cast<uint16_t>(flags | std::min<uint32_t>(k + 1, 0xFF));
  return true;
}

// The bounded number may end here (its fraction, if any, read): its integer part holds allowed magnitudes,
// it is not below the low bound (above it, where open) nor above the high bound (below it, where open).
bool JsonSchemaRecognizer::decimal_can_end() const {
  const JsonSchema::Magnitudes& m = schema_->node(s_.value).magnitudes[s_.flag];
  if (s_.number < m.whole_min || s_.number > m.whole_max) return false;
  const uint32_t k = s_.chars & 0xFF;
  if (at_low(m) && (k < m.low.frac.size() || m.low_open)) return false;
  if (at_high(m) && k >= m.high.frac.size() && m.high_open) return false;
  return true;
}

// A byte inside a number with decimal bounds (after its first), checked before the lexer reads it.
bool JsonSchemaRecognizer::decimal_number_byte(uint8_t byte) {
  const JsonSchema::Magnitudes& m = schema_->node(s_.value).magnitudes[s_.flag];
  const uint8_t phase = s_.count;
  if (json_lex::is_digit(byte)) {
    if (phase == json_lex::kMinus || phase == json_lex::kInt) return magnitude_digit(byte - '0');
    if (phase == json_lex::kDot || phase == json_lex::kFrac) return fraction_digit(byte - '0');
    return phase != json_lex::kZero || decimal_can_end();  // after a leading 0: the number ends
  }
  if (byte == 'e' || byte == 'E') return false;
  if ((phase == json_lex::kZero || phase == json_lex::kInt) && byte == '.')
    return s_.number >= m.whole_min && s_.number <= m.whole_max;
  if (phase == json_lex::kZero || phase == json_lex::kInt || phase == json_lex::kFrac)
    return decimal_can_end();
  return true;  // the lexer decides
}

bool JsonSchemaRecognizer::integer_part_in_range() const {
  const JsonSchema::Node& node = schema_->node(s_.value);
  return s_.number >= node.minimum && s_.number <= node.maximum && s_.number % node.multiple_of == 0;
}

// An integer digit: taken when the digits so far can still make an integer in range and a multiple of
// multipleOf (with more digits or without).
bool JsonSchemaRecognizer::bounded_digit(int64_t digit, bool negative) {
  const JsonSchema::Node& node = schema_->node(s_.value);
  const int64_t before = s_.number < 0 ? -s_.number : s_.number;
  if (before > (JsonSchema::kMaxIntegerBound - digit) / 10) return false;  // beyond 18 digits
  const int64_t magnitude = before * 10 + digit;
  // The integer parts this prefix can become: magnitude * 10^j + [0, 10^j) for j more digits (none after a
  // 0).
  int64_t scale = 1;
  for (int64_t m = magnitude;; m *= 10, scale *= 10) {
    const int64_t low = negative ? -(m + scale - 1) : m;
    const int64_t high = negative ? -m : m + scale - 1;
    if (json_schema_bounds::holds_multiple(std::max(low, node.minimum), std::min(high, node.maximum),
                                           node.multiple_of)) {
      s_.number = negative ? -magnitude : magnitude;
      return true;
    }
    if (magnitude == 0 || m > JsonSchema::kMaxIntegerBound / 10) return false;
  }
}

// A byte inside a bounded integer (after its first), checked before the lexer reads it: digits as
// bounded_digit, the end only in range and on a multiple.
bool JsonSchemaRecognizer::bounded_number_byte(uint8_t byte) {
  const uint8_t phase = s_.count;  // (an integer has no fraction or exponent: the lexer refuses them)
  if (json_lex::is_digit(byte)) {
    if (phase == json_lex::kMinus || phase == json_lex::kInt) return bounded_digit(byte - '0', s_.flag != 0);
    return phase != json_lex::kZero || integer_part_in_range();  // after a leading 0: the number ends
  }
  if (phase == json_lex::kZero || phase == json_lex::kInt) return integer_part_in_range();  // the end
  return true;  // the lexer decides
}

bool JsonSchemaRecognizer::operator==(const JsonSchemaRecognizer& other) const {
  return schema_ == other.schema_ && std::memcmp(&s_, &other.s_, sizeof(State)) == 0;
}

bool JsonSchemaRecognizer::fits(uint16_t node) const {
  return s_.depth + schema_->node(node).min_depth <= kMaxDepth;
}

void JsonSchemaRecognizer::finish_value() {
  if (s_.mode == kLiteral &&
      s_.depth > 0) {  // an object union's discriminator: the object is that branch now
    const JsonSchema::Node& object = schema_->node(top().node);
    if (!object.union_branches.empty()) {
      const int16_t branch = schema_->trie(s_.literal).property;
      top().node = object.union_branches[static_cast<size_t>(branch)];
      top().progress = 1;  // past the discriminator, which each branch has first
    }
  }
  s_.mode = kAfterValue;
  s_.count = 0;
  s_.value = 0;
  s_.literal = 0;
  if (s_.depth > 0 && schema_->node(top().node).kind == Kind::kArray && top().progress < UINT16_MAX)
    ++top().progress;
}

bool JsonSchemaRecognizer::value_start(uint16_t id, uint8_t byte) {
  const JsonSchema::Node& node = schema_->node(id);
  switch (node.kind) {
    case Kind::kChoice:
      for (uint16_t b : node.branches)
        if (schema_->may_start(b, byte) && fits(b)) return value_start(b, byte);
      return false;
    case Kind::kObject:
    case Kind::kArray:
      if (byte != (node.kind == Kind::kObject ? '{' : '[') || !fits(id)) return false;
      s_.frames[s_.depth++] = Frame{id, 0};
      s_.mode = node.kind == Kind::kObject ? kOpenObject : kOpenArray;
      s_.value = 0;
      return true;
    case Kind::kString:
      if (byte != '"') return false;
      s_.mode = kString;
      s_.value = id;
      s_.string_key = 0;
      if (node.regex >= 0) s_.number = schema_->regex(node.regex).start();
      return true;
    case Kind::kNumber:
    case Kind::kInteger: {
      uint8_t phase = 0;
      if (!json_lex::number_start(byte, phase)) return false;
      s_.value = id;
      s_.number = 0;
      s_.flag = 0;
      s_.chars = 0;
      if (decimal_bounded()) {
        s_.flag = byte == '-' ? 1 : 0;
        if (node.magnitudes[s_.flag].none || (byte != '-' && !magnitude_digit(byte - '0'))) return false;
      } else if (bounded()) {
        if (byte == '-') {
          if (node.minimum >= 0) return false;
          s_.flag = 1;
        } else if (!bounded_digit(byte - '0', false)) {
          return false;
        }
      }
      s_.mode = kNumber;
      s_.value = id;
      s_.count = phase;
      return true;
    }
    case Kind::kLiteral: {
      const int32_t next = schema_->trie_next(node.literal_root, byte);
      if (next < 0) return false;
      s_.mode = kLiteral;
      s_.value = id;
      s_.literal = static_cast<uint16_t>(next);
      const JsonSchema::TrieNode& t = schema_->trie(s_.literal);
      if (t.terminal && t.edges.empty()) finish_value();
      return true;
    }
  }
  return false;
}

// Property k may come next: it is not before the object's position, no required property is skipped to
// reach it, and its value can still be completed within the depth limit (required ones always can).
bool JsonSchemaRecognizer::key_allowed(const Frame& f, uint16_t k) const {
  const JsonSchema::Node& object = schema_->node(f.node);
  if (k < f.progress || k >= object.properties.size() || k > object.next_required[f.progress]) return false;
  return object.properties[k].required || fits(object.properties[k].node);
}

bool JsonSchemaRecognizer::key_reachable(const Frame& f, uint16_t trie_node) const {
  for (uint16_t k : schema_->trie(trie_node).below)
    if (key_allowed(f, k)) return true;
  return false;
}

// At a key's opening quote: a listed property's name, or any string for an object of free keys.
bool JsonSchemaRecognizer::key_start() {
  const JsonSchema::Node& object = schema_->node(top().node);
  if (!object.properties.empty()) {
    const int32_t next = schema_->trie_next(object.key_root, '"');
    if (next < 0 || !key_reachable(top(), static_cast<uint16_t>(next))) return false;
    s_.mode = kKeyLiteral;
    s_.literal = static_cast<uint16_t>(next);
    return true;
  }
  if (object.extra < 0 || !fits(static_cast<uint16_t>(object.extra)) ||
      top().progress >= object.max_properties)
    return false;
  if (top().progress < UINT16_MAX) ++top().progress;  // a map: its keys so far
  s_.mode = kString;
  s_.string_key = 1;
  return true;
}

bool JsonSchemaRecognizer::close(uint8_t byte) {
  if (s_.depth == 0) return false;
  const Frame& f = top();
  const JsonSchema::Node& node = schema_->node(f.node);
  if (node.kind == Kind::kObject) {
    if (byte != '}' ||
        (!node.properties.empty() && node.next_required[f.progress] < node.properties.size()) ||
        (node.properties.empty() && f.progress < node.min_properties))
      return false;
  } else {
    if (byte != ']' || f.progress < node.min_items) return false;
  }
  s_.frames[--s_.depth] = Frame{};
  finish_value();
  return true;
}

int32_t JsonSchemaRecognizer::string_budget() const {
  if (!in_plain_string()) return -1;
  if (s_.string_key) return INT32_MAX;
  const JsonSchema::Node& node = schema_->node(s_.value);
  if (node.regex >= 0)  // a pattern: every safe token fits only where its DFA takes anything (else walk)
    return schema_->regex(node.regex).universal(static_cast<uint16_t>(s_.number)) ? INT32_MAX : -1;
  if (!node.length_bounded() || node.max_length == UINT32_MAX) return INT32_MAX;
  return static_cast<int32_t>(node.max_length) - s_.chars;
}

// A length-bounded string's count of characters (code points): a new character at each byte that is not a
// UTF-8 continuation and at each escape; a \u escape of a low surrogate (\uDC00-\uDFFF) completes the
// character its high surrogate began, so it is not counted again.
bool JsonSchemaRecognizer::count_char(uint8_t byte) {
  if (s_.string_key) return true;
  const JsonSchema::Node& node = schema_->node(s_.value);
  if (!node.length_bounded() || (byte >= 0x80 && byte <= 0xBF)) return true;
  if (s_.chars >= node.max_length) return false;
  ++s_.chars;
  return true;
}

// A pattern string's character (an ASCII code, or any non-ASCII character as one symbol): its DFA moves on,
// into a live state only.
bool JsonSchemaRecognizer::pattern_char(int symbol) {
  if (s_.string_key) return true;
  const int32_t regex = schema_->node(s_.value).regex;
  if (regex < 0) return true;
  const uint16_t next = schema_->regex(regex).next(static_cast<uint16_t>(s_.number), symbol);
  if (next == JsonRegex::kDead) return false;
  s_.number = next;
  return true;
}

namespace {

// The character an escape stands for ('u': none here, \u escapes are not taken in pattern strings).
int escaped_symbol(uint8_t byte) {
  switch (byte) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case '/':
      return '/';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

}  // namespace

bool JsonSchemaRecognizer::string_byte(uint8_t byte) {
  const bool continuation = s_.utf8.left > 0;
  const bool pattern = !s_.string_key && schema_->node(s_.value).regex >= 0;
  switch (json_lex::string_byte(s_.utf8, byte)) {
    case json_lex::StringByte::kRejected:
      return false;
    case json_lex::StringByte::kContent:
      return continuation || (count_char(byte) && pattern_char(JsonRegex::symbol(byte)));
    case json_lex::StringByte::kBackslash:
      if (!count_char(byte)) return false;
      if (pattern) {  // only where some escape can go on
        const JsonRegex& regex = schema_->regex(schema_->node(s_.value).regex);
        bool any = false;
        for (uint8_t e : std::string_view("\"\\/bfnrt"))
          any = any || regex.next(static_cast<uint16_t>(s_.number), escaped_symbol(e)) != JsonRegex::kDead;
        if (!any) return false;
      }
      s_.mode = kEscape;
      return true;
    case json_lex::StringByte::kQuote:
      break;
  }
  if (!s_.string_key && s_.chars < schema_->node(s_.value).min_length) return false;  // too short
  if (pattern && !schema_->regex(schema_->node(s_.value).regex).accepting(static_cast<uint16_t>(s_.number)))
    return false;  // the pattern is not matched yet
  s_.chars = 0;
  s_.number = 0;
  if (s_.string_key) {  // a free key: its value follows the object's `extra` schema
    s_.string_key = 0;
    s_.mode = kColon;
    s_.value = static_cast<uint16_t>(schema_->node(top().node).extra);
    return true;
  }
  finish_value();
  return true;
}

bool JsonSchemaRecognizer::literal_byte(uint8_t byte) {
  const int32_t next = schema_->trie_next(s_.literal, byte);
  if (next >= 0) {
    s_.literal = static_cast<uint16_t>(next);
    const JsonSchema::TrieNode& t = schema_->trie(s_.literal);
    if (t.terminal && t.edges.empty()) finish_value();
    return true;
  }
  if (!schema_->trie(s_.literal).terminal) return false;
  finish_value();  // a literal that a longer one extends ("1" of "1", "10") ended: the byte is what follows
  return step(byte);
}

bool JsonSchemaRecognizer::key_byte(uint8_t byte) {
  const int32_t next = schema_->trie_next(s_.literal, byte);
  if (next < 0 || !key_reachable(top(), static_cast<uint16_t>(next))) return false;
  s_.literal = static_cast<uint16_t>(next);
  const int16_t k = schema_->trie(s_.literal).property;
  if (k < 0) return true;
  // The closing quote: the key is read.
  top().progress = static_cast<uint16_t>(k + 1);
  s_.mode = kColon;
  s_.literal = 0;
  s_.value = schema_->node(top().node).properties[static_cast<size_t>(k)].node;
  return true;
}

bool JsonSchemaRecognizer::step(uint8_t byte) {
  switch (s_.mode) {
    case kString:
      return string_byte(byte);
    case kEscape:
      if (!json_lex::is_escape(byte)) return false;
      if (!s_.string_key && schema_->node(s_.value).regex >= 0 &&
          (escaped_symbol(byte) < 0 || !pattern_char(escaped_symbol(byte))))
        return false;  // in a pattern string: the escaped character must fit (no \u)
      s_.mode = byte == 'u' ? kUnicode : kString;
      s_.count = 0;
      return true;
    case kUnicode:
      if (!json_lex::is_hex(byte)) return false;
      if (s_.count == 0 && (byte == 'd' || byte == 'D') && !s_.string_key &&
          schema_->node(s_.value).length_bounded())
        s_.flag = 1;
      if (s_.count == 1 && s_.flag) {
        if ((byte >= 'c' && byte <= 'f') || (byte >= 'C' && byte <= 'F')) --s_.chars;  // a low surrogate
        s_.flag = 0;
      }
      if (++s_.count == 4) {
        s_.mode = kString;
        s_.count = 0;
      }
      return true;
    case kNumber: {
      if (bounded() && !bounded_number_byte(byte)) return false;
      if (decimal_bounded() && !decimal_number_byte(byte)) return false;
      switch (json_lex::number_byte(s_.count, byte, schema_->node(s_.value).kind == Kind::kInteger)) {
        case json_lex::NumberByte::kRejected:
          return false;
        case json_lex::NumberByte::kContinues:
          return true;
        case json_lex::NumberByte::kEnded:
          break;
      }
      s_.number = 0;
      s_.flag = 0;
      s_.chars = 0;
      finish_value();
      return step(byte);
    }
    case kLiteral:
      return literal_byte(byte);
    case kKeyLiteral:
      return key_byte(byte);
    default:
      return between(byte);
  }
}

// Between tokens: whitespace, punctuation, the start of a value or key.
bool JsonSchemaRecognizer::between(uint8_t byte) {
  if (s_.mode == kAfterValue && s_.depth == 0) return s_.free_after;  // after the value: nothing, or anything
  if (json_lex::is_ws(byte)) {
    if (s_.whitespace >= kMaxWhitespaceRun) return false;
    ++s_.whitespace;
    return true;
  }
  s_.whitespace = 0;
  switch (s_.mode) {
    case kValue:
      return value_start(s_.value, byte);
    case kOpenArray: {
      if (byte == ']') return close(byte);
      const JsonSchema::Node& array = schema_->node(top().node);
      return array.max_items > 0 && value_start(array.item(0), byte);
    }
    case kOpenObject:
      if (byte == '}') return close(byte);
      [[fallthrough]];
    case kKey:
      return byte == '"' && key_start();
    case kColon:
      if (byte != ':') return false;
      s_.mode = kValue;
      return true;
    case kAfterValue: {
      if (byte != ',') return close(byte);
      const Frame& f = top();
      const JsonSchema::Node& node = schema_->node(f.node);
      if (node.kind == Kind::kArray) {
        const uint16_t item = node.item(f.progress);
        if ((node.max_items != UINT32_MAX && f.progress >= node.max_items) || !fits(item)) return false;
        s_.mode = kValue;
        s_.value = item;
        return true;
      }
      const bool more =
          node.properties.empty()
              ? node.extra >= 0 && fits(static_cast<uint16_t>(node.extra)) && f.progress < node.max_properties
              : key_reachable(f, node.key_root);
      if (!more) return false;
      s_.mode = kKey;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace dsinfer
