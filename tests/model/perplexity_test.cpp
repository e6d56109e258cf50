// Perplexity of the bundled deepseek-v3-tiny-code model on its held-out corpus reproduces transformers'
// figure (eval_ppl.json) within 0.1%, with the method spelled out there.
#include "engine/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "model/model.h"

namespace dsinfer {
namespace {

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

TEST(Perplexity, TokenStreamFollowsTheMethod) {
  Tokenizer tok = Tokenizer::load(kModel);
  std::string text = std::string("a = 1") + '\0' + "b" + '\0' + "";
  std::vector<int32_t> ids = perplexity_tokens(tok, text);
  // Three documents (the last one empty), each [bos] + ids + [eos].
  std::vector<int32_t> expected;
  for (const std::string& doc : {std::string("a = 1"), std::string("b"), std::string()}) {
    expected.push_back(*tok.bos_id());
    for (int32_t id : tok.encode(doc)) expected.push_back(id);
    expected.push_back(*tok.eos_id());
  }
  EXPECT_EQ(ids, expected);
}

TEST(Perplexity, ReproducesTheReferenceWithinATenthOfAPercent) {
  std::ifstream in(kModel + "/eval_ppl.json");
  nlohmann::json ref = nlohmann::json::parse(in);
  CpuBackend backend;
  LoadOptions options;
  options.progress = false;
  auto model = load_model(kModel, backend, options);
  PerplexityOptions popt;
  popt.window = ref["window_tokens"].get<int64_t>();
  popt.progress = false;
  PerplexityResult r = evaluate_perplexity(*model, kModel, kModel + "/eval_corpus.txt", popt);
  EXPECT_EQ(r.windows, ref["windows"].get<int64_t>());
  EXPECT_EQ(r.scored_tokens, ref["scored_tokens"].get<int64_t>());
  const double expected = ref["ppl"].get<double>();
  EXPECT_LT(std::abs(r.ppl - expected) / expected, 1e-3) << "ours " << r.ppl << " reference " << expected;
  EXPECT_NEAR(r.mean_nll, ref["mean_nll"].get<double>(), 1e-3);
}

}  // namespace
}  // namespace dsinfer
