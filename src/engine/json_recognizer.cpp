// JsonRecognizer: JSON's grammar as a state machine with an explicit container stack (see the header).
#include "engine/json_recognizer.h"

#include <cstring>

#include "engine/json_lexer.h"

namespace dsinfer {

static_assert(JsonRecognizer::kMaxDepth <= 64, "the container stack is a 64-bit set");

namespace {

using json_lex::is_digit;
using json_lex::is_hex;
using json_lex::is_ws;

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

}  // namespace

JsonRecognizer::JsonRecognizer(bool object_only, bool free_after) {
  s_.object_only = object_only ? 1 : 0;
  s_.free_after = free_after ? 1 : 0;
}

bool JsonRecognizer::feed(uint8_t byte) {
  const State saved = s_;
  if (step(byte)) return true;
  s_ = saved;
  return false;
}

bool JsonRecognizer::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!step(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonRecognizer::complete() const {
  if (s_.depth != 0) return false;
  if (s_.mode == kAfterValue) return true;
  return s_.mode == kNumber && json_lex::number_can_end(s_.count);
}

bool JsonRecognizer::operator==(const JsonRecognizer& other) const {
  return std::memcmp(&s_, &other.s_, sizeof(State)) == 0;
}

bool JsonRecognizer::whitespace(uint8_t byte) {
  if (s_.whitespace >= kMaxWhitespaceRun) return false;
  ++s_.whitespace;
  return true;
}

bool JsonRecognizer::value_start(uint8_t byte) {
  if (s_.depth == 0 && s_.object_only && byte != '{') return false;
  switch (byte) {
    case '{':
    case '[':
      if (s_.depth >= kMaxDepth) return false;
      if (byte == '{') s_.objects |= uint64_t{1} << s_.depth;
      ++s_.depth;
      s_.mode = byte == '{' ? kOpenObject : kOpenArray;
      return true;
    case '"':
      s_.mode = kString;
      s_.string_key = 0;
      return true;
    case 't':
    case 'f':
    case 'n':
      s_.mode = kLiteral;
      s_.literal = byte == 't' ? 0 : byte == 'f' ? 1 : 2;
      s_.count = 1;
      return true;
    default:
      if (!json_lex::number_start(byte, s_.count)) return false;
      s_.mode = kNumber;
      return true;
  }
}

bool JsonRecognizer::end_container(uint8_t byte) {
  if (s_.depth == 0) return false;
  const bool object = (s_.objects >> (s_.depth - 1)) & 1u;
  if (byte != (object ? '}' : ']')) return false;
  --s_.depth;
  s_.objects &= ~(uint64_t{1} << s_.depth);
  s_.mode = kAfterValue;
  s_.count = 0;
  return true;
}

bool JsonRecognizer::string_byte(uint8_t byte) {
  switch (json_lex::string_byte(s_.utf8, byte)) {
    case json_lex::StringByte::kRejected:
      return false;
    case json_lex::StringByte::kContent:
      return true;
    case json_lex::StringByte::kQuote:
      s_.mode = s_.string_key ? kColon : kAfterValue;
      s_.string_key = 0;
      return true;
    case json_lex::StringByte::kBackslash:
      s_.mode = kEscape;
      return true;
  }
  return false;
}

bool JsonRecognizer::number_byte(uint8_t byte) {
  switch (json_lex::number_byte(s_.count, byte)) {
    case json_lex::NumberByte::kRejected:
      return false;
    case json_lex::NumberByte::kContinues:
      return true;
    case json_lex::NumberByte::kEnded:
      break;
  }
  // The number has ended: the byte is the next token's.
  s_.mode = kAfterValue;
  s_.count = 0;
  return step(byte);
}

bool JsonRecognizer::step(uint8_t byte) {
  switch (s_.mode) {
    case kString:
      return string_byte(byte);
    case kEscape:
      if (byte == 'u') {
        s_.mode = kUnicode;
        s_.count = 0;
        return true;
      }
      if (!json_lex::is_escape(byte)) return false;
      s_.mode = kString;
      return true;
    case kUnicode:
      if (!is_hex(byte)) return false;
      if (++s_.count == 4) {
        s_.mode = kString;
        s_.count = 0;
      }
      return true;
    case kNumber:
      return number_byte(byte);
    case kLiteral: {
      const std::string_view word = kLiterals[s_.literal];
      if (byte != static_cast<uint8_t>(word[s_.count])) return false;
      if (++s_.count == word.size()) {
        s_.mode = kAfterValue;
        s_.count = 0;
        s_.literal = 0;
      }
      return true;
    }
    default:
      break;
  }
  // Between tokens.
  if (s_.mode == kAfterValue && s_.depth == 0) return s_.free_after;  // after the value: nothing, or anything
  if (is_ws(byte)) return whitespace(byte);
  s_.whitespace = 0;
  switch (s_.mode) {
    case kValue:
      return value_start(byte);
    case kOpenArray:
      return byte == ']' ? end_container(byte) : value_start(byte);
    case kOpenObject:
      if (byte == '}') return end_container(byte);
      [[fallthrough]];
    case kKey:
      if (byte != '"') return false;
      s_.mode = kString;
      s_.string_key = 1;
      return true;
    case kColon:
      if (byte != ':') return false;
      s_.mode = kValue;
      return true;
    case kAfterValue:
      if (byte == ',') {
        s_.mode = (s_.objects >> (s_.depth - 1)) & 1u ? kKey : kValue;
        return true;
      }
      return end_container(byte);
    default:
      return false;
  }
}

}  // namespace dsinfer
