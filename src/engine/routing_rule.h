// The golden check's routing rule (MoE models and sparse-attention models): a case that fails against the
// reference is excused when the only cause is discrete choices made at near ties: expert-routing decisions
// and the indexer's key selections (DeepSeek-V3.2, V4). The tested model runs the case's prompt and greedy
// continuation with its routing and selections recorded; the CPU reference runs the same tokens forced to
// them. Excused iff
//   (a) at least one routing decision or selection differs and every one that differs is within bf16 noise
//       of the reference's own choice (engine/routing_margin.h, engine/selection_margin.h), and
//   (b) with the reference forced to the tested choices, the prompt logits' rel L2 <= the tolerance and the
//       greedy tokens are identical or their first difference is excused by the margin rule (judged with
//       the forced reference's logits, which are known at every step).
// docs/architecture.md, "Routing rule".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/margin_rule.h"
#include "engine/routing_margin.h"
#include "engine/selection_margin.h"
#include "model/model.h"

namespace dsinfer {

struct RoutingExcuse {
  int64_t decisions = 0;                       // (token, MoE layer) decisions compared
  std::vector<RoutingFlip> flips;              // those whose expert set differs, each judged
  int64_t selection_rows = 0;                  // (token, indexed layer) selections compared (0: no indexer)
  std::vector<SelectionFlip> selection_flips;  // those whose kept rows differ, each judged
  double forced_rel_l2 = 0.0;                  // tested vs forced reference, all prompt rows
  double forced_max_abs = 0.0;                 // the largest |logit| difference there
  bool forced_greedy_match = false;
  GreedyMismatch forced_mismatch;  // the first greedy difference (step -1 when none)
  bool excused = false;
  std::string reason;  // one line: why (not) excused
  // The case's JSON fields: routing_flips {count, decisions, flips}, selection_flips {count, rows, flips}
  // (models with an indexer), forced_rel_l2, forced_greedy_match, forced_mismatch (when any),
  // excused_routing, routing_reason.
  nlohmann::json to_json() const;
};

struct RoutingRuleOptions {
  double rel_l2_tolerance = 2e-2;
  bool margin_rule = true;    // excuse a forced greedy difference within bf16 noise
  int64_t prefill_chunk = 0;  // > 0: prefill in chunks of this many tokens (both runs alike)
};

// Whether `model` routes tokens to experts through a MoeRoutingHook (dense models: false).
bool has_moe_routing(Model& model);

// Whether `model` selects key rows through an IndexSelectionHook (DeepSeek-V3.2, V4).
bool has_index_selection(Model& model);

// Whether the rule applies to `model` at all: has_moe_routing or has_index_selection.
bool has_discrete_choices(Model& model);

// Runs one case: `prompt`, then `greedy_steps` greedy tokens on `tested` (routing and selections recorded),
// the same tokens on `reference` (CPU backend) forced to them, and judges (a) and (b) above.
RoutingExcuse judge_routing(Model& tested, Model& reference, const std::vector<int32_t>& prompt,
                            int64_t greedy_steps, const RoutingRuleOptions& options);

}  // namespace dsinfer
