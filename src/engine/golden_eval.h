// Golden checks: run the prompts of a golden.safetensors file (fixtures format) and compare the logits and
// the 16-token greedy continuation with the reference (exactly, or under the margin rule).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/margin_rule.h"
#include "engine/routing_rule.h"
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
  // The first mismatch judged by the margin rule (engine/margin_rule.h); step -1 when the tokens match.
  // When excused, the tokens after it were not compared (greedy stops there).
  GreedyMismatch mismatch;
  bool excused_mismatch = false;
  // The routing rule (engine/routing_rule.h): run for a failing case of an MoE model when on.
  bool routing_checked = false;
  RoutingExcuse routing;
  bool excused_routing = false;  // the case passes because of it
  bool pass = false;
};

struct GoldenReport {
  bool pass = false;
  double tolerance = 1e-4;
  bool margin_rule = false;
  bool routing_rule = false;
  std::vector<GoldenCase> cases;
  nlohmann::json to_json() const;
};

struct GoldenOptions {
  double rel_l2_tolerance = 1e-4;
  int64_t prefill_chunk = 0;  // > 0: prefill in chunks of this many tokens
  // Excuse a greedy mismatch within bf16 noise (engine/margin_rule.h); on by default for non-CPU devices.
  bool margin_rule = false;
  // Excuse a failing case of an MoE model whose only cause is routing flips within bf16 noise
  // (engine/routing_rule.h); on by default for non-CPU devices. Needs `routing_reference`: the CPU
  // reference model, loaded on first use (only when a case of an MoE model fails).
  bool routing_rule = false;
  std::function<Model&()> routing_reference;
};

GoldenReport run_golden(Model& model, const std::string& golden_path, const GoldenOptions& options = {});

// ||ours - ref|| / ||ref|| over n values (||ours - ref|| when ref is all zeros); the largest |ours - ref|
// into *max_abs when given.
double rel_l2_error(const float* ours, const float* ref, int64_t n, double* max_abs = nullptr);

// The prompts (input_ids.N) of a golden file, in case order.
std::vector<std::vector<int32_t>> golden_prompts(const std::string& golden_path);

}  // namespace dsinfer
