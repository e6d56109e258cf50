// UTF-8 helpers for the tokenizer: validation, code point decoding, lossy decoding
// (U+FFFD for each maximal ill-formed subpart, as Rust's from_utf8_lossy / Python's errors="replace").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::utf8 {

inline constexpr size_t kValid = static_cast<size_t>(-1);

// Byte offset of the first ill-formed sequence in `s`, or kValid.
size_t find_invalid(std::string_view s);

// Length of the (valid) sequence starting with lead byte `b`.
inline size_t seq_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Decodes the code point at s[i] of valid UTF-8 and advances i past it.
char32_t decode(std::string_view s, size_t& i);

// Code point ending at byte `end` of valid UTF-8 (end > 0); sets `start` to its first byte.
char32_t decode_before(std::string_view s, size_t end, size_t& start);

void append(std::string& out, char32_t cp);

// Appends `bytes` to `out`, replacing each maximal ill-formed subpart with U+FFFD.
// When `final` is false, an incomplete but so-far valid sequence at the end is not consumed.
// Returns the number of bytes consumed.
size_t append_lossy(std::string_view bytes, bool final, std::string& out);

// Unicode White_Space (what Rust's char::is_whitespace and Oniguruma's \s accept).
bool is_whitespace(char32_t cp);

}  // namespace dsinfer::utf8
