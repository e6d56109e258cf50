// The index-selection analogue of the routing margin: how close to a tie the CPU reference's indexer was
// where a tested backend kept other key rows, and whether that is within bf16 noise. Used by the golden
// check's routing rule (engine/routing_rule.h), which replays selections beside routing. Precise statement
// (docs/architecture.md, "Routing rule"):
//
//   Scores are the reference's own (IndexScoreInputs): c_j = sum_h a_h * r_hj with a_h = w_h * weight_scale
//   and r_hj = relu(scale * q_h . k_j), for query token t and visible key row j.
//
//   Noise. The tested backend holds q_h, k_j and w as the reference does up to one bf16 rounding each:
//   |dq_h| <= u |q_h|, |dk_j| <= u |k_j| (L2 norms), |dw_h| <= u |w_h|, u = 2^-8 (kBf16UnitRoundoff; the
//   GPU keeps indexer keys in bf16). relu is 1-Lipschitz, so
//     |dr_hj| <= scale * (2u + u^2) |q_h| |k_j|,
//     reach_j = sum_h |a_h| * ((1 + u) * scale * (2u + u^2) |q_h| |k_j| + u * r_hj)
//   bounds |dc_j| (both directions).
//
//   A differing selection of token t (reference set S, tested set S', as sets): within noise iff |S| = |S'|,
//   every tested row is visible, and for every row a the tested dropped and every row b it took in,
//   c_a - c_b <= reach_a + reach_b (b can overtake a). `margin` / `bound` are those of the pair exceeding its
//   bound most (the closest to it when all are within); exact ties (margin 0, e.g. keys every head scores
//   <= 0) are always within.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/index_selection_hook.h"

namespace dsinfer {

// One (token, indexed layer) selection where the tested backend kept other key rows than the reference.
struct SelectionFlip {
  int64_t token = -1;        // position in the run (prompt tokens first, then greedy steps)
  int64_t layer = -1;        // model layer index
  std::string level;         // "rows", "invalid" (count differs, row not visible or repeated), "unknown"
  double margin = 0.0;       // c_a - c_b of the pair shown
  double bound = 0.0;        // reach_a + reach_b of that pair
  bool within = false;       // every pair within its bound
  std::vector<int32_t> out;  // rows the reference kept and the tested did not
  std::vector<int32_t> in;   // rows the tested kept and the reference did not
  nlohmann::json to_json() const;
};

// Reference score c_j of token t's key row j and its noise reach (above). The inputs must be the CPU
// reference's (float32 host tensors and cache); j must be visible to t.
double index_score(const IndexScoreInputs& in, int64_t t, int64_t j, double* reach);

// Judges token t's selection: `reference` and `tested` are its kept rows (-1 entries dropped), each sorted.
// token and layer are left at -1 for the caller.
SelectionFlip judge_selection_flip(const IndexScoreInputs& in, int64_t t,
                                   const std::vector<int32_t>& reference, const std::vector<int32_t>& tested);

}  // namespace dsinfer
