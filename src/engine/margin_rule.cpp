// The margin rule's arithmetic (see margin_rule.h for the statement and its justification).
#include "engine/margin_rule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsinfer {

nlohmann::json GreedyMismatch::to_json() const {
  return {{"step", step},      {"ours", ours},   {"reference", reference},
          {"margin", margin},  {"bound", bound}, {"margin_source", margin_source},
          {"excused", excused}};
}

double margin_bound(double measured_abs_err, double max_abs_logit) {
  return 2.0 * std::max(measured_abs_err, kBf16Epsilon * max_abs_logit);
}

double top2_margin(const float* v, int64_t n) {
  if (n < 2) return 0.0;
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > a) {
      b = a;
      a = v[i];
    } else if (v[i] > b) {
      b = v[i];
    }
  }
  return static_cast<double>(a) - b;
}

int32_t argmax_first(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

double max_abs(const float* v, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(v[i])));
  return m;
}

GreedyMismatch judge_margin(int step, int32_t our_token, int32_t ref_token, double margin,
                            const std::string& source, double max_abs_logit, double measured_abs_err,
                            bool rule_on) {
  GreedyMismatch m;
  m.step = step;
  m.ours = our_token;
  m.reference = ref_token;
  m.margin = margin;
  m.margin_source = source;
  m.bound = margin_bound(measured_abs_err, max_abs_logit);
  m.excused = rule_on && std::isfinite(m.margin) && m.margin <= m.bound;
  return m;
}

GreedyMismatch judge_mismatch(int step, const float* ours, const float* ref, int64_t vocab, int32_t our_token,
                              int32_t ref_token, double measured_abs_err, bool rule_on) {
  DSI_CHECK(our_token >= 0 && our_token < vocab && ref_token >= 0 && ref_token < vocab,
            "margin rule: token ids ", our_token, " and ", ref_token, " outside the vocabulary of ", vocab);
  if (ref) {
    return judge_margin(step, our_token, ref_token, top2_margin(ref, vocab), "reference_top2",
                        max_abs(ref, vocab), measured_abs_err, rule_on);
  }
  return judge_margin(step, our_token, ref_token, static_cast<double>(ours[our_token]) - ours[ref_token],
                      "our_gap", max_abs(ours, vocab), measured_abs_err, rule_on);
}

}  // namespace dsinfer
