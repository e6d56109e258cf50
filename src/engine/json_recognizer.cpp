// JsonRecognizer: JSON's grammar as a state machine with an explicit container stack (see the header).
#include "engine/json_recognizer.h"

#include <cstring>

namespace dsinfer {

static_assert(JsonRecognizer::kMaxDepth <= 64, "the container stack is a 64-bit set");

namespace {

bool is_ws(uint8_t b) {
  return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

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
  const bool number_can_end =
      s_.count == kZero || s_.count == kInt || s_.count == kFrac || s_.count == kExpDigits;
  return s_.mode == kNumber && number_can_end;
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
    case '-':
      s_.mode = kNumber;
      s_.count = kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      s_.mode = kLiteral;
      s_.literal = byte == 't' ? 0 : byte == 'f' ? 1 : 2;
      s_.count = 1;
      return true;
    default:
      if (!is_digit(byte)) return false;
      s_.mode = kNumber;
      s_.count = byte == '0' ? kZero : kInt;
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
  if (s_.utf8_left > 0) {
    if (byte < s_.utf8_low || byte > s_.utf8_high) return false;
    --s_.utf8_left;
    s_.utf8_low = 0x80;
    s_.utf8_high = 0xBF;
    return true;
  }
  if (byte == '"') {
    s_.mode = s_.string_key ? kColon : kAfterValue;
    s_.string_key = 0;
    return true;
  }
  if (byte == '\\') {
    s_.mode = kEscape;
    return true;
  }
  if (byte < 0x20) return false;  // control characters must be escaped
  if (byte < 0x80) return true;
  // A UTF-8 lead byte: how many continuation bytes follow and the range of the first (RFC 3629).
  if (byte >= 0xC2 && byte <= 0xDF) {
    s_.utf8_left = 1;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    s_.utf8_left = 2;
    if (byte == 0xE0) s_.utf8_low = 0xA0;   // no overlong forms
    if (byte == 0xED) s_.utf8_high = 0x9F;  // no surrogates
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    s_.utf8_left = 3;
    if (byte == 0xF0) s_.utf8_low = 0x90;
    if (byte == 0xF4) s_.utf8_high = 0x8F;  // at most U+10FFFF
  } else {
    return false;
  }
  return true;
}

bool JsonRecognizer::number_byte(uint8_t byte) {
  const bool digit = is_digit(byte);
  const bool exp = byte == 'e' || byte == 'E';
  switch (s_.count) {
    case kMinus:
      if (!digit) return false;
      s_.count = byte == '0' ? kZero : kInt;
      return true;
    case kZero:
    case kInt:
      if (digit && s_.count == kInt) return true;
      if (byte == '.') return s_.count = kDot, true;
      if (exp) return s_.count = kExp, true;
      break;
    case kDot:
      if (!digit) return false;
      s_.count = kFrac;
      return true;
    case kFrac:
      if (digit) return true;
      if (exp) return s_.count = kExp, true;
      break;
    case kExp:
      if (byte == '+' || byte == '-') return s_.count = kExpSign, true;
      if (!digit) return false;
      s_.count = kExpDigits;
      return true;
    case kExpSign:
      if (!digit) return false;
      s_.count = kExpDigits;
      return true;
    case kExpDigits:
      if (digit) return true;
      break;
  }
  // The number has ended (kZero, kInt, kFrac, kExpDigits): the byte is the next token's.
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
      if (byte != '"' && byte != '\\' && byte != '/' && byte != 'b' && byte != 'f' && byte != 'n' &&
          byte != 'r' && byte != 't')
        return false;
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
