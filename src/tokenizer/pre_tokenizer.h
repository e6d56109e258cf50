// Pre-tokenizers of tokenizer.json: Sequence, Split, ByteLevel and Digits. They cut the text
// into pieces that the BPE model encodes independently.
#pragma once
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"

namespace dsinfer {

// Pieces of one text segment. Views point into the segment or into `arena`.
struct PreTokenized {
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  // True when a final ByteLevel step applies: pieces hold raw bytes still to be byte-mapped.
  bool byte_mapped = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // Parses the "pre_tokenizer" value (null means no pre-tokenization). Throws on unsupported types.
  static PreTokenizer from_json(const nlohmann::json& j);

  // Replaces `out` with the pieces of `text`.
  void run(std::string_view text, PreTokenized& out) const;

  // True when the last step is ByteLevel (the model then receives raw bytes).
  bool ends_with_byte_level() const;

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    std::shared_ptr<const Regex> regex;  // Split pattern, or the GPT-2 pattern of ByteLevel
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
    bool use_regex = false;
  };
  static void parse(const nlohmann::json& j, std::vector<Step>& steps);

  std::vector<Step> steps_;
};

// Splits `piece` by the matches of `regex` per `behavior`, appending non-empty parts to `out`.
void split_piece(std::string_view piece, const Regex& regex, SplitBehavior behavior, bool invert,
                 std::vector<std::string_view>& out);

}  // namespace dsinfer
