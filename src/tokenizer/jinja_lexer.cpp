// Jinja lexer (see jinja_lexer.h). Follows Jinja 3.1 whitespace semantics: '-' strips all whitespace
// next to the tag, lstrip_blocks removes indentation before block/comment tags that start a line,
// trim_blocks removes the first newline after a block/comment tag, '+' disables either.
#include "tokenizer/jinja_lexer.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace dsinfer::jinja {
namespace {

// Bytes of Python whitespace starting at pos.
size_t whitespace_run(const std::string& s, size_t pos) {
  size_t end = pos;
  while (end < s.size()) {
    unsigned char c = s[end];
    if (c < 0x80) {
      if (!is_py_space(c)) break;
      ++end;
      continue;
    }
    size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    std::vector<uint32_t> cp = utf8_decode(std::string_view(s).substr(end, n));
    if (cp.empty() || !is_py_space(cp[0])) break;
    end += n;
  }
  return end - pos;
}

std::string rstrip_ws(const std::string& s) {
  return py_strip(s, std::nullopt, false, true);
}

// Whether s (one line, no newline) is non-empty and all whitespace.
bool all_whitespace(std::string_view s) {
  if (s.empty()) return false;
  for (uint32_t cp : utf8_decode(s))
    if (!is_py_space(cp)) return false;
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes Python string-literal escapes the way Jinja does (unicode-escape).
std::string decode_string(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          DSI_CHECK(h >= 0, "chat template line ", line, ": truncated \\", e, " escape in string literal");
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        DSI_CHECK(cp <= 0x10FFFF, "chat template line ", line, ": invalid \\U escape in string literal");
        i += digits;
        utf8_append(out, cp);
        break;
      }
      case 'N':
        fail("chat template line ", line, ": \\N{...} escapes in string literals are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          utf8_append(out, cp);
        } else {  // unknown escapes are kept verbatim
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& opts) : src_(std::move(src)), opts_(opts) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_));
        advance_to(src_.size());
        break;
      }
      lex_tag(tag);
    }
    tokens_.push_back({Token::Type::Eof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void advance_to(size_t pos) {
    for (size_t i = pos_; i < pos; ++i)
      if (src_[i] == '\n') ++line_;
    pos_ = pos;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, std::move(text), line_});
  }

  // Text before a tag, with '-' stripping or lstrip_blocks applied.
  void emit_text_before(size_t tag, char kind, char sign) {
    std::string text = src_.substr(pos_, tag - pos_);
    if (sign == '-') {
      text = rstrip_ws(text);
    } else if (sign != '+' && kind != '{' && opts_.lstrip_blocks) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if ((l_pos > 0 || line_starting_) && all_whitespace(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
    emit_text(std::move(text));
  }

  // Consumes a tag end at pos_ of the given form; returns false when none is there.
  bool try_tag_end(char closer, bool trim_newline) {
    // closer is '%', '}' or '#'; the tag ends with closer followed by '}'.
    auto at = [&](size_t i, std::string_view s) { return src_.compare(i, s.size(), s) == 0; };
    std::string end = std::string(1, closer) + "}";
    size_t start = pos_;
    size_t p;
    if (at(pos_, "-" + end)) {
      p = pos_ + 3;
      p += whitespace_run(src_, p);
    } else if (closer != '}' && at(pos_, "+" + end)) {
      p = pos_ + 3;
    } else if (at(pos_, end)) {
      p = pos_ + 2;
      if (trim_newline && opts_.trim_blocks && p < src_.size() && src_[p] == '\n') ++p;
    } else {
      return false;
    }
    advance_to(p);
    line_starting_ = p > start && src_[p - 1] == '\n';
    return true;
  }

  void lex_tag(size_t tag) {
    char kind = src_[tag + 1];
    size_t p = tag + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    if (kind == '%' && lex_raw(tag, p, sign)) return;
    emit_text_before(tag, kind, sign);
    advance_to(p);
    int tag_line = line_;
    if (kind == '#') {
      for (size_t close = src_.find("#}", pos_); close != std::string::npos;
           close = src_.find("#}", close + 1)) {
        size_t start = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? close - 1 : close;
        advance_to(start);
        if (try_tag_end('#', true)) return;
      }
      fail("chat template line ", tag_line, ": unclosed comment");
    }
    bool block = kind == '%';
    tokens_.push_back({block ? Token::Type::BlockBegin : Token::Type::VarBegin, "", line_});
    lex_expression(block ? '%' : '}', tag_line);
    tokens_.push_back({block ? Token::Type::BlockEnd : Token::Type::VarEnd, "", line_});
  }

  // Handles {% raw %}...{% endraw %}; returns false when the block tag is not 'raw'.
  bool lex_raw(size_t tag, size_t p, char sign) {
    size_t q = p + whitespace_run(src_, p);
    if (src_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    q += whitespace_run(src_, q);
    size_t after_open;
    if (src_.compare(q, 3, "-%}") == 0) {
      after_open = q + 3 + whitespace_run(src_, q + 3);
    } else if (src_.compare(q, 2, "%}") == 0) {
      after_open = q + 2;
    } else {
      return false;
    }
    emit_text_before(tag, '%', sign);
    int open_line = line_;
    advance_to(after_open);
    line_starting_ = after_open > 0 && src_[after_open - 1] == '\n';
    // Find {% endraw %} (with optional whitespace control).
    for (size_t close = src_.find("{%", pos_); close != std::string::npos;
         close = src_.find("{%", close + 1)) {
      size_t r = close + 2;
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      r += whitespace_run(src_, r);
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      r += whitespace_run(src_, r);
      if (src_.compare(r, 2, "%}") != 0 && src_.compare(r, 3, "-%}") != 0 && src_.compare(r, 3, "+%}") != 0)
        continue;
      emit_text_before(close, '%', end_sign);
      advance_to(r);
      if (!try_tag_end('%', true)) fail("chat template line ", line_, ": malformed endraw tag");
      return true;
    }
    fail("chat template line ", open_line, ": missing {% endraw %}");
  }

  void lex_expression(char closer, int tag_line) {
    std::vector<char> balance;
    while (true) {
      size_t ws = whitespace_run(src_, pos_);
      advance_to(pos_ + ws);
      DSI_CHECK(pos_ < src_.size(), "chat template line ", tag_line, ": unclosed ",
                closer == '%' ? "block tag {% ... %}" : "expression {{ ... }}");
      if (balance.empty() && try_tag_end(closer, closer == '%')) return;
      char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back({Token::Type::Name, src_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(balance);
      }
    }
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&]() {
      size_t start = e;
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                 (src_[e] == '_' && e > start && e + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[e + 1])))))
        ++e;
      return e > start;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t save = e;
      ++e;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (digits()) {
        is_float = true;
      } else {
        e = save;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line_});
    advance_to(e);
  }

  void lex_string(char quote) {
    int start_line = line_;
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    DSI_CHECK(e < src_.size(), "chat template line ", start_line, ": unterminated string literal");
    tokens_.push_back({Token::Type::String,
                       decode_string(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), start_line),
                       start_line});
    advance_to(e + 1);
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                      ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
    for (const char* op : ops) {
      std::string_view o(op);
      if (src_.compare(pos_, o.size(), o) != 0) continue;
      char c = o[0];
      if (o.size() == 1 && (c == '(' || c == '[' || c == '{')) {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (o.size() == 1 && (c == ')' || c == ']' || c == '}')) {
        DSI_CHECK(!balance.empty() && balance.back() == c, "chat template line ", line_, ": unexpected '", c,
                  "'");
        balance.pop_back();
      }
      tokens_.push_back({Token::Type::Op, std::string(o), line_});
      advance_to(pos_ + o.size());
      return;
    }
    fail("chat template line ", line_, ": unexpected character '", src_[pos_], "'");
  }

  std::string src_;
  LexerOptions opts_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// Jinja normalizes \r\n and \r to \n and drops one trailing newline unless keep_trailing_newline.
std::string normalize_source(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_source(source, options.keep_trailing_newline), options).run();
}

}  // namespace dsinfer::jinja
