// Fast path for loading tokenizer.json: pulls model.vocab and model.merges (most of the file)
// straight out of the text, leaving the small rest for nlohmann::json. Anything unexpected makes
// it give up, and the caller parses the whole file the ordinary way (which reports errors).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsinfer {

struct BpeTables {
  std::vector<std::pair<std::string, int64_t>> vocab;       // in file order
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

struct ExtractedTokenizerJson {
  std::string rest;  // the text with model.vocab replaced by {} and model.merges by []
  BpeTables tables;
};

std::optional<ExtractedTokenizerJson> extract_bpe_tables(std::string_view text);

}  // namespace dsinfer
