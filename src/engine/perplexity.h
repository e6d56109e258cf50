// Perplexity over a corpus with the method of the reference (deepseek-v3-tiny-code/eval_ppl.json):
// documents separated by NUL, each encoded as [bos] + ids + [eos], concatenated, cut into consecutive
// non-overlapping windows (partial tail dropped), each window run from an empty cache and scored on its
// tokens 1..W-1.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

struct PerplexityOptions {
  int64_t window = 256;
  int64_t max_windows = 0;  // 0: all
  bool progress = true;     // progress bar on a terminal
};

struct PerplexityResult {
  double ppl = 0.0;
  double mean_nll = 0.0;
  int64_t scored_tokens = 0;
  int64_t windows = 0;
  nlohmann::json to_json() const;
};

// The token stream the method scores.
std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, const std::string& corpus_text);

PerplexityResult evaluate_perplexity(Model& model, const std::vector<int32_t>& tokens,
                                     const PerplexityOptions& options);
// Reads the corpus file and the tokenizer from `model_dir`.
PerplexityResult evaluate_perplexity(Model& model, const std::string& model_dir,
                                     const std::string& corpus_path, const PerplexityOptions& options);

}  // namespace dsinfer
