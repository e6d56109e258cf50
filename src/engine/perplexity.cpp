// Windowed perplexity evaluation.
#include "engine/perplexity.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/sequence_runner.h"

namespace dsinfer {

nlohmann::json PerplexityResult::to_json() const {
  return {{"ppl", ppl}, {"mean_nll", mean_nll}, {"scored_tokens", scored_tokens}, {"windows", windows}};
}

std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, const std::string& text) {
  DSI_CHECK(tokenizer.bos_id() && tokenizer.eos_id(),
            "perplexity needs bos and eos tokens in tokenizer_config.json");
  std::vector<int32_t> tokens;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\0', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view doc(text.data() + begin, end - begin);
    tokens.push_back(*tokenizer.bos_id());
    std::vector<int32_t> ids = tokenizer.encode(doc, false);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(*tokenizer.eos_id());
    begin = end + 1;
  }
  return tokens;
}

PerplexityResult evaluate_perplexity(Model& model, const std::vector<int32_t>& tokens,
                                     const PerplexityOptions& options) {
  const int64_t W = options.window;
  DSI_CHECK(W >= 2, "perplexity window must hold at least 2 tokens");
  DSI_CHECK(W <= model.config().max_position_embeddings, "perplexity window of ", W,
            " tokens exceeds the model's context of ", model.config().max_position_embeddings);
  int64_t windows = static_cast<int64_t>(tokens.size()) / W;
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);
  DSI_CHECK(windows > 0, "the corpus has ", tokens.size(), " tokens, fewer than one window of ", W);
  const int64_t V = model.config().vocab_size;
  SequenceRunner runner(model, W);
  ProgressBar progress("perplexity", windows, options.progress && stderr_is_terminal());
  double nll = 0.0;
  int64_t scored = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> ids(tokens.begin() + w * W, tokens.begin() + (w + 1) * W);
    runner.reset();
    Tensor logits = runner.append(ids, /*all_logits=*/true);  // [W, V]
    for (int64_t i = 1; i < W; ++i) {
      const float* row = logits.f32() + (i - 1) * V;
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll += (mx + std::log(sum)) - row[ids[i]];
      ++scored;
    }
    progress.update(w + 1);
  }
  progress.finish();
  PerplexityResult r;
  r.windows = windows;
  r.scored_tokens = scored;
  r.mean_nll = nll / static_cast<double>(scored);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

PerplexityResult evaluate_perplexity(Model& model, const std::string& model_dir,
                                     const std::string& corpus_path, const PerplexityOptions& options) {
  std::ifstream in(corpus_path, std::ios::binary);
  DSI_CHECK(in.good(), "cannot open corpus ", corpus_path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  Tokenizer tokenizer = Tokenizer::load(model_dir);
  return evaluate_perplexity(model, perplexity_tokens(tokenizer, buffer.str()), options);
}

}  // namespace dsinfer
