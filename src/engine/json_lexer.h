// json_lex: JSON's lexical pieces (string bytes with strict UTF-8, numbers, whitespace) as small byte
// steps over caller-held state, shared by the JSON recognisers (json_recognizer, json_schema_recognizer) so
// that both accept exactly the same strings and numbers.
#pragma once
#include <cstdint>

namespace dsinfer::json_lex {

inline bool is_ws(uint8_t b) {
  return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

inline bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

inline bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

// The character after '\' in a string (\u is followed by four hex digits).
inline bool is_escape(uint8_t b) {
  return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't' ||
         b == 'u';
}

// Inside a string: the UTF-8 continuation bytes still due and the allowed range of the next one.
struct Utf8State {
  uint8_t left = 0;
  uint8_t low = 0x80;
  uint8_t high = 0xBF;
};

enum class StringByte : uint8_t { kRejected, kContent, kQuote, kBackslash };

// One byte inside a string: content (state updated), the closing quote, the start of an escape, or refused
// (control characters, malformed UTF-8: overlong forms, surrogates, beyond U+10FFFF).
inline StringByte string_byte(Utf8State& u, uint8_t byte) {
  if (u.left > 0) {
    if (byte < u.low || byte > u.high) return StringByte::kRejected;
    --u.left;
    u.low = 0x80;
    u.high = 0xBF;
    return StringByte::kContent;
  }
  if (byte == '"') return StringByte::kQuote;
  if (byte == '\\') return StringByte::kBackslash;
  if (byte < 0x20) return StringByte::kRejected;  // control characters must be escaped
  if (byte < 0x80) return StringByte::kContent;
  // A lead byte: how many continuation bytes follow and the range of the first (RFC 3629).
  if (byte >= 0xC2 && byte <= 0xDF) {
    u.left = 1;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    u.left = 2;
    if (byte == 0xE0) u.low = 0xA0;   // no overlong forms
    if (byte == 0xED) u.high = 0x9F;  // no surrogates
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    u.left = 3;
    if (byte == 0xF0) u.low = 0x90;
    if (byte == 0xF4) u.high = 0x8F;  // at most U+10FFFF
  } else {
    return StringByte::kRejected;
  }
  return StringByte::kContent;
}

// Where a number is: after '-', after a leading 0, in the integer digits, after '.', in the fraction, after
// 'e', after the exponent's sign, in the exponent's digits.
enum NumberPhase : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

// A number's first byte ('-' or a digit) and its phase.
inline bool number_start(uint8_t byte, uint8_t& phase) {
  if (byte == '-') return phase = kMinus, true;
  if (!is_digit(byte)) return false;
  phase = byte == '0' ? kZero : kInt;
  return true;
}

inline bool number_can_end(uint8_t phase) {
  return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits;
}

enum class NumberByte : uint8_t { kRejected, kContinues, kEnded };

// One byte after a number's start. kEnded: the number was complete and the byte is not its own (the caller
// reads it as what follows). integer: no fraction or exponent.
inline NumberByte number_byte(uint8_t& phase, uint8_t byte, bool integer = false) {
  const bool digit = is_digit(byte);
  const bool exp = !integer && (byte == 'e' || byte == 'E');
  switch (phase) {
    case kMinus:
      if (!digit) return NumberByte::kRejected;
      phase = byte == '0' ? kZero : kInt;
      return NumberByte::kContinues;
    case kZero:
    case kInt:
      if (digit && phase == kInt) return NumberByte::kContinues;
      if (byte == '.' && !integer) return phase = kDot, NumberByte::kContinues;
      if (exp) return phase = kExp, NumberByte::kContinues;
      break;
    case kDot:
      if (!digit) return NumberByte::kRejected;
      phase = kFrac;
      return NumberByte::kContinues;
    case kFrac:
      if (digit) return NumberByte::kContinues;
      if (exp) return phase = kExp, NumberByte::kContinues;
      break;
    case kExp:
      if (byte == '+' || byte == '-') return phase = kExpSign, NumberByte::kContinues;
      if (!digit) return NumberByte::kRejected;
      phase = kExpDigits;
      return NumberByte::kContinues;
    case kExpSign:
      if (!digit) return NumberByte::kRejected;
      phase = kExpDigits;
      return NumberByte::kContinues;
    case kExpDigits:
      if (digit) return NumberByte::kContinues;
      break;
  }
  return NumberByte::kEnded;  // kZero, kInt, kFrac, kExpDigits
}

}  // namespace dsinfer::json_lex
