// The routing rule: the teacher-forced replay of one golden case and its verdict (see routing_rule.h).
#include "engine/routing_rule.h"

#include <cmath>

#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/routing_hooks.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

// The verdict from the numbers (a) and (b).
void decide(RoutingExcuse& r, double tolerance) {
  r.excused = false;
  if (r.flips.empty()) {
    r.reason = "no routing decision differs from the reference's: the error does not come from routing";
    return;
  }
  // The flip that decides: a flip outside its bound if any, else the one closest to its bound.
  auto excess = [](const RoutingFlip& f) {
    const double e = f.margin - f.bound;
    return std::isnan(e) ? INFINITY : e;
  };
  const RoutingFlip* worst = nullptr;
  for (const RoutingFlip& f : r.flips) {
    if (!worst || (worst->within && !f.within) || (worst->within == f.within && excess(f) > excess(*worst))) {
      worst = &f;
    }
  }
  const std::string at = "token " + std::to_string(worst->token) + " layer " + std::to_string(worst->layer);
  if (!worst->within) {
    r.reason = "routing flip at " + at + " (" + worst->level + " level) has margin " +
               format_numbers("%.3e > bound %.3e", worst->margin, worst->bound) + ": not bf16 noise";
    return;
  }
  if (!(r.forced_rel_l2 <= tolerance)) {
    r.reason = format_numbers("with the reference forced to this routing rel_l2 is %.3e > %.1e",
                              r.forced_rel_l2, tolerance);
    return;
  }
  if (!r.forced_greedy_match && !r.forced_mismatch.excused) {
    r.reason =
        "with the reference forced to this routing greedy differs at step " +
        std::to_string(r.forced_mismatch.step) +
        format_numbers(" (margin %.3e vs bound %.3e)", r.forced_mismatch.margin, r.forced_mismatch.bound);
    return;
  }
  r.excused = true;
  r.reason = std::to_string(r.flips.size()) + " of " + std::to_string(r.decisions) +
             " routing decisions flipped, all within bf16 noise (closest to its bound: " + at +
             format_numbers(", margin %.3e vs %.3e)", worst->margin, worst->bound) +
             format_numbers("; forced rel_l2 %.3e <= %.1e", r.forced_rel_l2, tolerance) + ", greedy " +
             (r.forced_greedy_match ? "identical" : "within the margin rule");
}

}  // namespace

nlohmann::json RoutingExcuse::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const RoutingFlip& f : flips) list.push_back(f.to_json());
  nlohmann::json j = {{"routing_flips", {{"count", flips.size()}, {"decisions", decisions}, {"flips", list}}},
                      {"forced_rel_l2", forced_rel_l2},
                      {"forced_greedy_match", forced_greedy_match},
                      {"excused_routing", excused},
                      {"routing_reason", reason}};
  if (!forced_greedy_match) j["forced_mismatch"] = forced_mismatch.to_json();
  return j;
}

bool has_moe_routing(Model& model) {
  return model.config().n_routed_experts > 0 && model.set_moe_routing_hook(nullptr);
}

RoutingExcuse judge_routing(Model& tested, Model& reference, const std::vector<int32_t>& prompt,
                            int64_t greedy_steps, const RoutingRuleOptions& options) {
  const int64_t V = tested.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  const int64_t capacity = n + greedy_steps + 1;
  // The tested model: prompt logits, greedy tokens and our logits at each greedy step, routing recorded.
  RoutingRecorder recorder;
  Tensor tested_prompt;                  // [n, V]
  std::vector<int32_t> greedy;           // [greedy_steps]
  std::vector<std::vector<float>> ours;  // [greedy_steps][V]
  {
    ScopedRoutingHook scope(tested, &recorder, "routing rule");
    SequenceRunner runner(tested, capacity);
    tested_prompt = runner.append(prompt, /*all_logits=*/true, options.prefill_chunk).clone();
    Tensor last = tested_prompt.rows(n - 1, n);  // [1, V]
    for (int64_t g = 0; g < greedy_steps; ++g) {
      ours.emplace_back(last.f32(), last.f32() + V);
      greedy.push_back(argmax_first(ours.back().data(), V));
      if (g + 1 < greedy_steps) last = runner.append({greedy.back()}).clone();
    }
  }
  // The reference on the same tokens, forced to the recorded routing.
  RoutingExcuse r;
  RoutingForcer forcer(recorder.calls);
  {
    ScopedRoutingHook scope(reference, &forcer, "routing rule");
    SequenceRunner runner(reference, capacity);
    Tensor forced = runner.append(prompt, /*all_logits=*/true, options.prefill_chunk);  // [n, V]
    DSI_CHECK(forced.shape() == tested_prompt.shape(), "routing rule: logits of shapes ",
              shape_str(tested_prompt.shape()), " and ", shape_str(forced.shape()));
    r.forced_rel_l2 = rel_l2_error(tested_prompt.f32(), forced.f32(), forced.numel(), &r.forced_max_abs);
    Tensor last = forced.rows(n - 1, n).clone();  // [1, V]
    r.forced_greedy_match = true;
    for (int64_t g = 0; g < greedy_steps; ++g) {
      const int32_t ref_token = argmax_first(last.f32(), V);
      if (ref_token != greedy[g]) {
        r.forced_greedy_match = false;
        r.forced_mismatch = judge_mismatch(static_cast<int>(g), ours[g].data(), last.f32(), V, greedy[g],
                                           ref_token, r.forced_max_abs, options.margin_rule);
        break;  // the reference would continue from another token: nothing after this is compared
      }
      if (g + 1 < greedy_steps) last = runner.append({greedy[g]}).clone();
    }
    DSI_CHECK(!r.forced_greedy_match || forcer.all_used(),
              "routing rule: the tested model routed more often than the reference");
  }
  r.decisions = forcer.decisions;
  r.flips = forcer.flips;
  decide(r, options.rel_l2_tolerance);
  return r;
}

}  // namespace dsinfer
