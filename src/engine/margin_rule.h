// The margin rule: when a greedy mismatch between two runs of the same model (ours vs a reference) is
// excused as bf16 noise rather than counted as a bug. Used by `eval golden` (ours vs Hugging Face) and
// `eval batch-agreement` (batched vs one at a time). Precise statement (docs/architecture.md, "Margin
// rule"):
//
//   At the first step i where the greedy tokens differ (ours o, reference r; every earlier token equal, so
//   both saw the same prefix), let
//     margin = the reference's top-1 minus top-2 logit at step i when its logits there are known, else
//              our logit of o minus our logit of r (>= 0: we chose o);
//     delta  = max(measured, 2^-7 * max_v |logit_v|), the per-logit noise: `measured` is the largest
//              absolute logit error measured for this case (0 when none was), 2^-7 the bf16 epsilon
//              times the step's largest logit (the reference's when known, else ours);
//     bound  = 2 * delta.
//   The mismatch is excused iff margin <= bound; then the rest of that greedy sequence is not compared
//   (it continues from a different token). A second mismatch cannot be excused: nothing after i counts.
//
// Why 2 * delta: if every logit of ours is within delta of the reference's, a flip between r and o needs
// ref[r] - ref[o] <= 2 * delta and ours[o] - ours[r] <= 2 * delta; a larger margin is a real error.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dsinfer {

inline constexpr double kBf16Epsilon = 1.0 / 128.0;  // 2^-7: the gap between 1 and the next bf16

struct GreedyMismatch {
  int step = -1;              // index into the greedy continuation
  int32_t ours = -1;          // our token there
  int32_t reference = -1;     // the reference's token there
  double margin = 0.0;        // see above
  std::string margin_source;  // "reference_top2" or "our_gap"
  double bound = 0.0;         // 2 * delta
  bool excused = false;       // margin <= bound and the rule is on
  nlohmann::json to_json() const;
};

// 2 * max(measured_abs_err, 2^-7 * max_abs_logit).
double margin_bound(double measured_abs_err, double max_abs_logit);

// Judges the mismatch at `step`: ours [V] our logits there (o = our_token), ref [V] the reference's logits
// there or nullptr when unknown (r = ref_token). `rule_on` false: margin and bound are filled, never
// excused.
GreedyMismatch judge_mismatch(int step, const float* ours, const float* ref, int64_t vocab, int32_t our_token,
                              int32_t ref_token, double measured_abs_err, bool rule_on);

// The same from precomputed numbers: `margin` from `source`, max_abs_logit the step's largest |logit|.
GreedyMismatch judge_margin(int step, int32_t our_token, int32_t ref_token, double margin,
                            const std::string& source, double max_abs_logit, double measured_abs_err,
                            bool rule_on);

// top-1 minus top-2 of v [n] (0 when n < 2).
double top2_margin(const float* v, int64_t n);
// max_v |v[v]| over v [n].
double max_abs(const float* v, int64_t n);
// The first index of the largest value (the engine's greedy rule: lowest id on ties).
int32_t argmax_first(const float* v, int64_t n);

}  // namespace dsinfer
