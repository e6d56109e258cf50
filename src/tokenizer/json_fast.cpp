// A minimal JSON scanner for the vocab object and merges array of tokenizer.json.
#include "tokenizer/json_fast.h"

#include "tokenizer/utf8.h"

namespace dsinfer {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view t) : t_(t) {}

  size_t pos() const { return p_; }
  void skip_ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t')) ++p_;
  }
  bool eat(char c) {
    skip_ws();
    if (p_ < t_.size() && t_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_ws();
    return p_ < t_.size() && t_[p_] == c;
  }

  // Parses a string at the current position into `out` (when not null).
  bool string(std::string* out) {
    if (!eat('"')) return false;
    if (out) out->clear();
    while (p_ < t_.size()) {
      const size_t start = p_;
      while (p_ < t_.size() && t_[p_] != '"' && t_[p_] != '\\' && static_cast<unsigned char>(t_[p_]) >= 0x20)
        ++p_;
      if (out) out->append(t_.data() + start, p_ - start);
      if (p_ >= t_.size()) return false;
      const char c = t_[p_];
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c != '\\') return false;  // raw control character
      if (++p_ >= t_.size()) return false;
      const char e = t_[p_++];
      char simple = 0;
      switch (e) {
        case '"':
          simple = '"';
          break;
        case '\\':
          simple = '\\';
          break;
        case '/':
          simple = '/';
          break;
        case 'b':
          simple = '\b';
          break;
        case 'f':
          simple = '\f';
          break;
        case 'n':
          simple = '\n';
          break;
        case 'r':
          simple = '\r';
          break;
        case 't':
          simple = '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (p_ + 1 >= t_.size() || t_[p_] != '\\' || t_[p_ + 1] != 'u') return false;
            p_ += 2;
            if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          if (out) utf8::append(*out, cp);
          continue;
        }
        default:
          return false;
      }
      if (out) out->push_back(simple);
    }
    return false;
  }

  bool integer(int64_t& v) {
    skip_ws();
    const size_t start = p_;
    bool neg = false;
    if (p_ < t_.size() && t_[p_] == '-') {
      neg = true;
      ++p_;
    }
    v = 0;
    size_t digits = 0;
    while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9' && digits < 15) {
      v = v * 10 + (t_[p_++] - '0');
      ++digits;
    }
    if (digits == 0 || (p_ < t_.size() && (t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E' ||
                                           (t_[p_] >= '0' && t_[p_] <= '9')))) {
      p_ = start;
      return false;
    }
    if (neg) v = -v;
    return true;
  }

  // Skips any value (strings, nesting and literals), without validating literals in detail.
  bool skip_value() {
    skip_ws();
    if (p_ >= t_.size()) return false;
    const char c = t_[p_];
    if (c == '"') return string(nullptr);
    if (c == '{' || c == '[') {
      int depth = 0;
      while (p_ < t_.size()) {
        const char d = t_[p_];
        if (d == '"') {
          if (!string(nullptr)) return false;
          continue;
        }
        if (d == '{' || d == '[') ++depth;
        if (d == '}' || d == ']') {
          if (--depth == 0) {
            ++p_;
            return true;
          }
        }
        ++p_;
      }
      return false;
    }
    const size_t start = p_;
    while (p_ < t_.size() && t_[p_] != ',' && t_[p_] != '}' && t_[p_] != ']' && t_[p_] != ' ' &&
           t_[p_] != '\n' && t_[p_] != '\r' && t_[p_] != '\t')
      ++p_;
    return p_ > start;
  }

 private:
  bool hex4(uint32_t& v) {
    if (p_ + 4 > t_.size()) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = t_[p_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  std::string_view t_;
  size_t p_ = 0;
};

bool parse_vocab(Scanner& s, BpeTables& out) {
  if (!s.eat('{')) return false;
  if (s.eat('}')) return true;
  std::string key;
  do {
    int64_t id = 0;
    if (!s.string(&key) || !s.eat(':') || !s.integer(id)) return false;
    out.vocab.emplace_back(key, id);
  } while (s.eat(','));
  return s.eat('}');
}

bool parse_merges(Scanner& s, BpeTables& out) {
  if (!s.eat('[')) return false;
  if (s.eat(']')) return true;
  std::string a, b;
  do {
    if (s.peek('"')) {
      if (!s.string(&a)) return false;
      const size_t space = a.find(' ');
      if (space == std::string::npos || a.find(' ', space + 1) != std::string::npos) return false;
      out.merges.emplace_back(a.substr(0, space), a.substr(space + 1));
    } else {
      if (!s.eat('[') || !s.string(&a) || !s.eat(',') || !s.string(&b) || !s.eat(']')) return false;
      out.merges.emplace_back(a, b);
    }
  } while (s.eat(','));
  return s.eat(']');
}

}  // namespace

std::optional<ExtractedTokenizerJson> extract_bpe_tables(std::string_view text) {
  if (utf8::find_invalid(text) != utf8::kValid) return std::nullopt;
  ExtractedTokenizerJson result;
  Scanner s(text);
  // Spans of the text to replace: [begin, end) -> replacement.
  size_t vocab_b = 0, vocab_e = 0, merges_b = 0, merges_e = 0;
  bool have_vocab = false, have_merges = false;
  if (!s.eat('{')) return std::nullopt;
  std::string key;
  if (!s.peek('}')) {
    do {
      if (!s.string(&key) || !s.eat(':')) return std::nullopt;
      if (key != "model") {
        if (!s.skip_value()) return std::nullopt;
        continue;
      }
      if (!s.eat('{')) return std::nullopt;
      if (s.eat('}')) continue;
      do {
        std::string inner;
        if (!s.string(&inner) || !s.eat(':')) return std::nullopt;
        s.skip_ws();
        if (inner == "vocab" && !have_vocab) {
          vocab_b = s.pos();
          if (!parse_vocab(s, result.tables)) return std::nullopt;
          vocab_e = s.pos();
          have_vocab = true;
        } else if (inner == "merges" && !have_merges && s.peek('[')) {
          merges_b = s.pos();
          if (!parse_merges(s, result.tables)) return std::nullopt;
          merges_e = s.pos();
          have_merges = true;
        } else if (!s.skip_value()) {
          return std::nullopt;
        }
      } while (s.eat(','));
      if (!s.eat('}')) return std::nullopt;
    } while (s.eat(','));
  }
  if (!have_vocab) return std::nullopt;
  // Rebuild the text without the two big values, in file order.
  std::vector<std::pair<size_t, size_t>> cut = {{vocab_b, vocab_e}};
  std::vector<const char*> repl = {"{}"};
  if (have_merges) {
    if (merges_b < vocab_b) {
      cut.insert(cut.begin(), {merges_b, merges_e});
      repl.insert(repl.begin(), "[]");
    } else {
      cut.emplace_back(merges_b, merges_e);
      repl.push_back("[]");
    }
  }
  size_t at = 0;
  for (size_t i = 0; i < cut.size(); ++i) {
    result.rest.append(text.substr(at, cut[i].first - at));
    result.rest += repl[i];
    at = cut[i].second;
  }
  result.rest.append(text.substr(at));
  return result;
}

}  // namespace dsinfer
