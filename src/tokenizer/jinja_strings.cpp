// Python str semantics on UTF-8 strings (see jinja_strings.h).
#include "tokenizer/jinja_strings.h"

#include <algorithm>

namespace dsinfer::jinja {
namespace {

// Length of the UTF-8 sequence starting with byte c (1 for invalid lead bytes).
size_t seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
uint32_t to_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t to_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

// Python's str.isprintable() for repr(): control, format, separator (except ' '), surrogate and
// private-use characters are escaped. Unassigned code points are not tracked.
bool is_repr_printable(uint32_t c) {
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF)
    return false;
  if (c == 0x061C || c == 0x180E || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xF0000)) return false;
  return true;
}

bool is_cased_letter(uint32_t c) {
  return to_upper(c) != c || to_lower(c) != c;
}

template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_decode(s)) utf8_append(out, f(cp));
  return out;
}

bool in_chars(uint32_t cp, const std::vector<uint32_t>& chars) {
  return std::find(chars.begin(), chars.end(), cp) != chars.end();
}

}  // namespace

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = std::min(seq_len(c), s.size() - i);
    uint32_t cp = n == 1 ? c : (c & (0xFF >> (n + 1)));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(seq_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == 0xDF) {  // German sharp s upper-cases to "SS"
      out += "SS";
    } else {
      utf8_append(out, to_upper(cp));
    }
  }
  return out;
}
std::string py_lower(std::string_view s) {
  return map_chars(s, to_lower);
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (uint32_t cp : utf8_decode(s)) {
    utf8_append(out, first ? to_upper(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : utf8_decode(s)) {
    utf8_append(out, prev_cased ? to_lower(cp) : to_upper(cp));
    prev_cased = is_cased_letter(cp);
  }
  return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](uint32_t cp) { return chars ? in_chars(cp, set) : is_py_space(cp); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) utf8_append(out, cps[i]);
  return out;
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<std::pair<size_t, size_t>> ranges;  // code point ranges of words
  size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (i < n) {
      while (i < n && is_py_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(ranges.size()) == maxsplit) {
        size_t e = n;
        while (e > i && is_py_space(cps[e - 1])) --e;
        ranges.push_back({i, e});
        break;
      }
      size_t b = i;
      while (i < n && !is_py_space(cps[i])) ++i;
      ranges.push_back({b, i});
    }
  } else {
    size_t i = n;
    while (i > 0) {
      while (i > 0 && is_py_space(cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(ranges.size()) == maxsplit) {
        size_t b = 0;
        while (b < i && is_py_space(cps[b])) ++b;
        ranges.push_back({b, i});
        break;
      }
      size_t e = i;
      while (i > 0 && !is_py_space(cps[i - 1])) --i;
      ranges.push_back({i, e});
    }
    std::reverse(ranges.begin(), ranges.end());
  }
  std::vector<std::string> out;
  for (auto [b, e] : ranges) {
    std::string w;
    for (size_t k = b; k < e; ++k) utf8_append(w, cps[k]);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit, false);
  std::vector<std::string> out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t at = s.find(*sep, pos);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, at - pos));
    pos = at + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit, true);
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t b = 0, i = 0;
  while (i < s.size()) {
    size_t brk = 0;
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
      brk = 2;
    } else if (s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f' || s[i] == '\x1c' ||
               s[i] == '\x1d' || s[i] == '\x1e') {
      brk = 1;
    }
    if (brk) {
      out.emplace_back(s.substr(b, (keepends ? i + brk : i) - b));
      i += brk;
      b = i;
    } else {
      ++i;
    }
  }
  if (b < s.size()) out.emplace_back(s.substr(b));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t done = 0;
    for (const std::string& ch : utf8_chars(s)) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += ch;
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(repl);
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string py_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!is_repr_printable(cp)) {
      static const char* hex = "0123456789abcdef";
      int digits = cp < 0x100 ? 2 : cp < 0x10000 ? 4 : 8;
      out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
      for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 0xF];
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

}  // namespace dsinfer::jinja
