// Added (and special) tokens of tokenizer.json and their matching in raw text: leftmost-longest
// over a byte trie, with the single_word / lstrip / rstrip rules of Hugging Face tokenizers.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text: either plain text or one added token (with the spaces it stripped).
struct Segment {
  size_t begin, end;
  int32_t token_id;  // -1 for plain text
};

// Matches a fixed set of added tokens.
class AddedTokenMatcher {
 public:
  void build(const std::vector<AddedToken>& tokens);
  bool empty() const { return nodes_.size() <= 1; }
  // Splits text[begin, end) into segments appended to `out`.
  void split(std::string_view text, size_t begin, size_t end, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index, sorted
    int32_t token = -1;                                 // index into tokens_ when a token ends here
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // Length of the longest token starting at text[pos] (0 if none), with its index.
  size_t longest_at(std::string_view text, size_t pos, size_t end, int32_t& token) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

// Parses the "added_tokens" array.
std::vector<AddedToken> parse_added_tokens(const nlohmann::json& j);

}  // namespace dsinfer
