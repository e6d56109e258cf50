// The routing analogue of the margin rule: how close to a tie one MoE routing decision of the CPU reference
// was, and whether a different decision by the tested backend is within bf16 noise of it. Used by the
// golden check's routing rule (engine/routing_rule.h) and reported by `eval golden --routing-check`.
// Precise statement (docs/architecture.md, "Routing rule"):
//
//   Selection scores c_e are the values the reference ranks, in its own units: sigmoid(l_e) + bias_e for
//   noaux_tc (the biased scores), softmax(l)_e for (group-limited) greedy, l = W x the router logits of
//   the router input x [H]. Group-limited methods first keep the topk_group groups ranked by their group
//   score (noaux_tc: the sum of the group's top-2 biased scores; group_limited_greedy: its largest score).
//
//   Noise. The tested backend's router input equals the reference's up to bf16 noise: |dx| <= u * |x|
//   (L2 norms) with u = 2^-8, the bf16 unit roundoff (half of margin_rule's 2^-7 epsilon; one bf16
//   rounding of every element moves x by at most that much). By Cauchy-Schwarz no router row turns that
//   into more than
//     delta_e = u * |w_e| * |x|            (|w_e| the L2 norm of expert e's router row)
//   of logit error; this is "2^-8 relative to the scale of the scores": |w_e| * |x| is the largest value
//   logit e can take for a hidden state of that size. Propagated through the score function exactly
//   (it is monotone): up_e = c_e(l_e + delta_e) - c_e(l_e), down_e = c_e(l_e) - c_e(l_e - delta_e). For
//   softmax the normaliser is held fixed, since it is common to all experts and does not change their
//   order. A group score's reach is the same group score over the raised (lowered) expert scores.
//
//   A flipped decision (reference set S, tested set S'): the flip is within noise iff for every expert a
//   the tested dropped and every expert b it took in, c_a - c_b <= down_a + up_b (b can overtake a); and,
//   where the tested took experts from groups the reference did not keep (a group-level flip), every such
//   group h against each of the weakest kept groups the tested must have dropped (as many as it took in,
//   among the kept groups it took no expert from): gs_d - gs_h <= down_d + up_h. `margin` and `bound` are
//   those of the pair that exceeds its bound most (for a single swap of the reference's weakest selected
//   expert for its strongest unselected one, margin is exactly the reference's own selection margin), and
//   `bound` is the analogue of margin_rule's 2 * delta: each of the two scores may move by its own reach.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/margin_rule.h"

namespace dsinfer {

inline constexpr double kBf16UnitRoundoff = kBf16Epsilon / 2;  // 2^-8

// One token's routing as the CPU reference decides it, with how far noise can move each score.
struct RoutingScores {
  int64_t per_group = 0;                            // experts per group (E when the method has no groups)
  std::vector<double> score, up, down;              // [E] selection scores c_e and their noise reach
  std::vector<double> group, group_up, group_down;  // [G] group scores and reach (G = 1 without groups)
  std::vector<int32_t> kept_groups;                 // the groups the reference keeps
  std::vector<int32_t> selected;                    // its top-k experts, in descending score order
};

// One routing decision where the tested backend chose a different expert set than the reference.
struct RoutingFlip {
  int64_t token = -1;        // position in the sequence (prompt tokens first, then greedy steps)
  int64_t layer = -1;        // model layer index
  std::string level;         // "expert", "group" or "invalid" (ids out of range or repeated)
  double margin = 0.0;       // c_a - c_b (gs_d - gs_h) of the pair shown; see above
  double bound = 0.0;        // down_a + up_b of that pair
  bool within = false;       // every pair of the flip is within its bound
  std::vector<int32_t> out;  // experts the reference chose and the tested did not
  std::vector<int32_t> in;   // experts the tested chose and the reference did not
  nlohmann::json to_json() const;
};

// Router logits of x [T, H] as the CPU reference computes them (same GEMM call): [T * E], row-major.
// x, router [E, H] must be float32 host tensors.
std::vector<float> router_logits(const Tensor& x, const Tensor& router);

// Selection scores of one token: logits [E] from router_logits, x_row [H] its router input, bias [E] or
// empty (used by noaux_tc only, as in the CPU reference).
RoutingScores routing_scores(const float* logits, const float* x_row, const Tensor& router,
                             const Tensor& bias, const RoutingParams& p);

// Judges one decision: the reference's ids [k] against the tested backend's ids [k]. token and layer are
// left at -1 for the caller.
RoutingFlip judge_routing_flip(const RoutingScores& s, const int32_t* reference_ids,
                               const int32_t* tested_ids, int64_t k);

}  // namespace dsinfer
