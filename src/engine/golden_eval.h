// Golden checks: run the prompts of a golden.safetensors file (fixtures format) and compare the logits and
// the 16-token greedy continuation with the reference.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace dsinfer {

struct GoldenCase {
  int index = 0;
  int64_t tokens = 0;
  double max_abs_err = 0.0;
  double rel_l2_err = 0.0;
  bool greedy_match = false;
  std::vector<int32_t> greedy;           // ours
  std::vector<int32_t> expected_greedy;  // reference
  int first_mismatch = -1;               // index into greedy, -1 when equal
  double mismatch_margin = 0.0;          // reference top-2 logit gap at the first mismatch (our logits)
  bool pass = false;
};

struct GoldenReport {
  bool pass = false;
  double tolerance = 1e-4;
  std::vector<GoldenCase> cases;
  nlohmann::json to_json() const;
};

struct GoldenOptions {
  double rel_l2_tolerance = 1e-4;
  int64_t prefill_chunk = 0;  // > 0: prefill in chunks of this many tokens
};

GoldenReport run_golden(Model& model, const std::string& golden_path, const GoldenOptions& options = {});

}  // namespace dsinfer
