// Byte <-> character tables of the GPT-2 byte-level alphabet (bytes_to_unicode).
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace dsinfer::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int, 324> to_byte;  // every mapped code point is below 256 + 68

  Tables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& char_for_byte(uint8_t b) {
  return tables().to_char[b];
}

int byte_for_char(char32_t cp) {
  return cp < 324 ? tables().to_byte[cp] : -1;
}

void map_bytes(std::string_view raw, std::string& out) {
  const Tables& t = tables();
  for (char c : raw) out += t.to_char[static_cast<uint8_t>(c)];
}

bool unmap(std::string_view mapped, std::string& out) {
  size_t i = 0;
  while (i < mapped.size()) {
    const int b = byte_for_char(utf8::decode(mapped, i));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace dsinfer::byte_level
