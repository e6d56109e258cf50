// UTF-8 validation and lossy decoding following the Unicode "maximal subpart" practice.
#include "tokenizer/utf8.h"

namespace dsinfer::utf8 {
namespace {

// Allowed range of the second byte for a lead byte; continuation bytes after it are 80..BF.
struct LeadInfo {
  int len;  // 0 when the byte can never start a sequence
  unsigned char lo, hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

enum class Step { kOk, kBad, kTruncated };

// Examines the sequence at s[i]; `n` receives the bytes it covers (the maximal subpart when bad).
Step examine(std::string_view s, size_t i, size_t& n) {
  const auto b = static_cast<unsigned char>(s[i]);
  const LeadInfo info = lead_info(b);
  if (info.len == 1) {
    n = 1;
    return Step::kOk;
  }
  if (info.len == 0) {
    n = 1;
    return Step::kBad;
  }
  for (int k = 1; k < info.len; ++k) {
    if (i + k >= s.size()) {
      n = s.size() - i;
      return Step::kTruncated;
    }
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char lo = k == 1 ? info.lo : 0x80;
    const unsigned char hi = k == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) {
      n = static_cast<size_t>(k);
      return Step::kBad;
    }
  }
  n = static_cast<size_t>(info.len);
  return Step::kOk;
}

}  // namespace

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Fast path over ASCII.
    while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
    if (i >= s.size()) break;
    size_t n = 0;
    if (examine(s, i, n) != Step::kOk) return i;
    i += n;
  }
  return kValid;
}

char32_t decode(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const size_t len = seq_len(b);
  char32_t cp = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

char32_t decode_before(std::string_view s, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return decode(s, i);
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t append_lossy(std::string_view bytes, bool final, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  size_t run = 0;  // start of the pending run of valid bytes
  while (i < bytes.size()) {
    size_t n = 0;
    const Step step = examine(bytes, i, n);
    if (step == Step::kOk) {
      i += n;
      continue;
    }
    out.append(bytes.data() + run, i - run);
    if (step == Step::kTruncated && !final) return i;
    out.append(kReplacement, 3);
    i += n;
    run = i;
  }
  out.append(bytes.data() + run, i - run);
  return i;
}

bool is_whitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace dsinfer::utf8
