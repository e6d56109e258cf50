// The GPT-2 byte-level alphabet: each byte maps to one printable Unicode character.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::byte_level {

// UTF-8 encoding of the character that stands for byte `b`.
const std::string& char_for_byte(uint8_t b);

// The byte a character stands for, or -1 when `cp` is not in the alphabet.
int byte_for_char(char32_t cp);

// Maps every byte of `raw` to its character and appends the result to `out`.
void map_bytes(std::string_view raw, std::string& out);

// Converts a byte-level string back to bytes; returns false (leaving `out` unspecified)
// when some character is not in the alphabet.
bool unmap(std::string_view mapped, std::string& out);

}  // namespace dsinfer::byte_level
