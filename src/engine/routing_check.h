// Teacher-forced routing check for MoE models: each prompt runs on the model under test (e.g. on the GPU)
// with its expert routing recorded, then on the reference (the CPU backend) forced to that routing. The
// forced reference differs from the tested model only by the kernels' arithmetic, not by which experts
// were chosen, so a logits error that is large freely but small forced comes from routing decisions that
// flipped; `flipped` counts the (token, layer) decisions whose expert set differs from the reference's own.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/routing_margin.h"
#include "model/model.h"

namespace dsinfer {

struct RoutingCheckCase {
  int index = 0;
  int64_t tokens = 0;
  int64_t decisions = 0;           // (token, MoE layer) routing decisions
  int64_t flipped = 0;             // of those, chosen expert sets that differ from the reference's own
  std::vector<RoutingFlip> flips;  // each of those, judged against the reference's scores
  double free_rel_l2 = 0.0;        // tested vs reference, each routing by itself (all prompt rows)
  double forced_rel_l2 = 0.0;      // tested vs reference forced to the tested model's routing
};

// Runs `prompts` (prefilled in chunks of prefill_chunk tokens when > 0) through both models. `reference`
// must run on the CPU backend; both must take a routing hook (MoE models). Throws dsinfer::Error otherwise.
std::vector<RoutingCheckCase> run_routing_check(Model& tested, Model& reference,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t prefill_chunk = 0);

// The flips as a JSON array of RoutingFlip::to_json.
nlohmann::json flips_json(const std::vector<RoutingFlip>& flips);

nlohmann::json routing_check_json(const std::vector<RoutingCheckCase>& cases);

}  // namespace dsinfer
