// Teacher-forced routing check for MoE and sparse-attention models: each prompt runs on the model under test
// (e.g. on the GPU) with its expert routing and indexer selections recorded, then on the reference (the CPU
// backend) forced to them. The forced reference differs from the tested model only by the kernels'
// arithmetic, not by which experts or key rows were chosen, so a logits error that is large freely but small
// forced comes from choices that flipped; `flipped` counts the (token, layer) routing decisions whose expert
// set differs from the reference's own, `selections_differ` the selections whose kept rows differ.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/routing_margin.h"
#include "engine/selection_margin.h"
#include "model/model.h"

namespace dsinfer {

struct RoutingCheckCase {
  int index = 0;
  int64_t tokens = 0;
  int64_t decisions = 0;           // (token, MoE layer) routing decisions
  int64_t flipped = 0;             // of those, chosen expert sets that differ from the reference's own
  std::vector<RoutingFlip> flips;  // each of those, judged against the reference's scores
  int64_t selections = 0;          // (token, indexed layer) selections (0: no indexer)
  int64_t selections_differ = 0;   // of those, kept rows that differ from the reference's
  std::vector<SelectionFlip> selection_flips;  // each of those, judged against the reference's scores
  double free_rel_l2 = 0.0;                    // tested vs reference, each choosing by itself (prompt rows)
  double forced_rel_l2 = 0.0;                  // tested vs reference forced to the tested model's choices
};

// Runs `prompts` (prefilled in chunks of prefill_chunk tokens when > 0) through both models. `reference`
// must run on the CPU backend; both must take a routing hook or a selection hook (MoE or sparse-attention
// models). Throws dsinfer::Error otherwise.
std::vector<RoutingCheckCase> run_routing_check(Model& tested, Model& reference,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t prefill_chunk = 0);

// The flips as a JSON array of RoutingFlip::to_json.
nlohmann::json flips_json(const std::vector<RoutingFlip>& flips);

nlohmann::json routing_check_json(const std::vector<RoutingCheckCase>& cases);

}  // namespace dsinfer
