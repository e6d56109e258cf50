// Added-token parsing and leftmost-longest matching in raw text.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace dsinfer {
namespace {

// Rust's char::is_alphanumeric() || '_' : a "word" character for single_word tokens.
bool is_word_char(std::string_view s) {
  static const Regex word(R"([\p{L}\p{N}_])");
  return word.matches_at_start(s);
}

bool ends_with_word(std::string_view text, size_t end, size_t floor) {
  if (end <= floor) return false;
  size_t start = 0;
  utf8::decode_before(text, end, start);
  return is_word_char(text.substr(start, end - start));
}

bool starts_with_word(std::string_view text, size_t begin, size_t end) {
  if (begin >= end) return false;
  return is_word_char(text.substr(begin, utf8::seq_len(static_cast<unsigned char>(text[begin]))));
}

}  // namespace

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& j) {
  std::vector<AddedToken> tokens;
  if (j.is_null()) return tokens;
  DSI_CHECK(j.is_array(), "tokenizer: 'added_tokens' must be an array");
  for (const auto& t : j) {
    DSI_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                  t["content"].is_string(),
              "tokenizer: each added token needs an integer 'id' and a string 'content'");
    AddedToken a;
    a.content = t["content"].get<std::string>();
    const int64_t id = t["id"].get<int64_t>();
    DSI_CHECK(id >= 0 && id < INT32_MAX, "tokenizer: added token '", a.content, "' has id ", id,
              " out of range");
    DSI_CHECK(!a.content.empty(), "tokenizer: added token ", id, " has empty content");
    a.id = static_cast<int32_t>(id);
    a.special = t.value("special", false);
    a.single_word = t.value("single_word", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.normalized = t.value("normalized", !a.special);
    tokens.push_back(std::move(a));
  }
  return tokens;
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(byte, int32_t{-1}));
  return it != ch.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens) {
  tokens_ = tokens;
  nodes_.assign(1, Node{});
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    first_byte_[static_cast<uint8_t>(s[0])] = true;
    int32_t node = 0;
    for (char c : s) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& ch = nodes_[node].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(byte, int32_t{-1})), {byte, next});
      }
      node = next;
    }
    nodes_[node].token = static_cast<int32_t>(t);  // a duplicate content keeps the last entry
  }
}

size_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t end, int32_t& token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < end; ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      best = i + 1 - pos;
      token = nodes_[node].token;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, size_t begin, size_t end,
                              std::vector<Segment>& out) const {
  size_t start_offset = begin;  // end of what has been emitted
  size_t pos = begin;
  while (pos < end) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t t = -1;
    const size_t len = longest_at(text, pos, end, t);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos, stop = pos + len;
    pos = stop;  // matches never overlap
    if (token.single_word) {
      if (ends_with_word(text, start, begin) || starts_with_word(text, stop, end)) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t cs = 0;
        if (!utf8::is_whitespace(utf8::decode_before(text, s, cs))) break;
        s = cs;
      }
      start = s;
    }
    if (token.rstrip) {
      while (stop < end) {
        size_t i = stop;
        if (!utf8::is_whitespace(utf8::decode(text, i))) break;
        stop = i;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < end) out.push_back({start_offset, end, -1});
}

}  // namespace dsinfer
