// The routing rule: the teacher-forced replay of one golden case and its verdict (see routing_rule.h).
#include "engine/routing_rule.h"

#include <cmath>
#include <optional>

#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/routing_hooks.h"
#include "engine/selection_hooks.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

// One differing choice as the verdict weighs it: a routing flip or a differing selection.
struct Choice {
  bool within = false;
  double margin = 0.0, bound = 0.0;
  std::string what;  // "routing flip at token T layer L (expert level)" / "selection at token T layer L"
  // How far past its bound (infinite when the margin is not a number).
  double excess() const {
    const double e = margin - bound;
    return std::isnan(e) ? INFINITY : e;
  }
};

std::vector<Choice> choices_of(const RoutingExcuse& r) {
  std::vector<Choice> all;
  for (const RoutingFlip& f : r.flips) {
    all.push_back({f.within, f.margin, f.bound,
                   "routing flip at token " + std::to_string(f.token) + " layer " + std::to_string(f.layer) +
                       " (" + f.level + " level)"});
  }
  for (const SelectionFlip& f : r.selection_flips) {
    all.push_back({f.within, f.margin, f.bound,
                   "selection at token " + std::to_string(f.token) + " layer " + std::to_string(f.layer) +
                       " (" + f.level + ", " + std::to_string(f.in.size()) + " rows swapped)"});
  }
  return all;
}

// The verdict from the numbers (a) and (b).
void decide(RoutingExcuse& r, double tolerance) {
  r.excused = false;
  const std::vector<Choice> all = choices_of(r);
  if (all.empty()) {
    r.reason =
        "no routing decision or index selection differs from the reference's: the error does not come "
        "from them";
    return;
  }
  // The choice that decides: one outside its bound if any, else the one closest to its bound.
  const Choice* worst = nullptr;
  for (const Choice& c : all) {
    if (!worst || (worst->within && !c.within) ||
        (worst->within == c.within && c.excess() > worst->excess())) {
      worst = &c;
    }
  }
  if (!worst->within) {
    r.reason = worst->what + " has margin " +
               format_numbers("%.3e > bound %.3e", worst->margin, worst->bound) + ": not bf16 noise";
    return;
  }
  if (!(r.forced_rel_l2 <= tolerance)) {
    r.reason = format_numbers("with the reference forced to these choices rel_l2 is %.3e > %.1e",
                              r.forced_rel_l2, tolerance);
    return;
  }
  if (!r.forced_greedy_match && !r.forced_mismatch.excused) {
    r.reason =
        "with the reference forced to these choices greedy differs at step " +
        std::to_string(r.forced_mismatch.step) +
        format_numbers(" (margin %.3e vs bound %.3e)", r.forced_mismatch.margin, r.forced_mismatch.bound);
    return;
  }
  r.excused = true;
  r.reason =
      std::to_string(r.flips.size()) + " of " + std::to_string(r.decisions) + " routing decisions flipped";
  if (r.selection_rows > 0) {
    r.reason += ", " + std::to_string(r.selection_flips.size()) + " of " + std::to_string(r.selection_rows) +
                " index selections differ";
  }
  r.reason += ", all within bf16 noise (closest to its bound: " + worst->what +
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
  if (selection_rows > 0) {
    nlohmann::json rows = nlohmann::json::array();
    for (const SelectionFlip& f : selection_flips) rows.push_back(f.to_json());
    j["selection_flips"] = {{"count", selection_flips.size()}, {"rows", selection_rows}, {"flips", rows}};
  }
  if (!forced_greedy_match) j["forced_mismatch"] = forced_mismatch.to_json();
  return j;
}

bool has_moe_routing(Model& model) {
  return model.set_moe_routing_hook(nullptr);
}

bool has_index_selection(Model& model) {
  return model.set_index_selection_hook(nullptr);
}

bool has_discrete_choices(Model& model) {
  return has_moe_routing(model) || has_index_selection(model);
}

RoutingExcuse judge_routing(Model& tested, Model& reference, const std::vector<int32_t>& prompt,
                            int64_t greedy_steps, const RoutingRuleOptions& options) {
  const int64_t V = tested.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  const int64_t capacity = n + greedy_steps + 1;
  const bool routing = has_moe_routing(tested), selection = has_index_selection(tested);
  DSI_CHECK(routing || selection, "routing rule: the model has neither MoE routing nor an indexer");
  // The tested model: prompt logits, greedy tokens and our logits at each greedy step, choices recorded.
  RoutingRecorder recorder;
  SelectionRecorder selections;
  Tensor tested_prompt;                  // [n, V]
  std::vector<int32_t> greedy;           // [greedy_steps]
  std::vector<std::vector<float>> ours;  // [greedy_steps][V]
  {
    std::optional<ScopedRoutingHook> route_scope;
    std::optional<ScopedSelectionHook> select_scope;
    if (routing) route_scope.emplace(tested, &recorder, "routing rule");
    if (selection) select_scope.emplace(tested, &selections, "routing rule");
    SequenceRunner runner(tested, capacity);
    tested_prompt = runner.append(prompt, /*all_logits=*/true, options.prefill_chunk).clone();
    Tensor last = tested_prompt.rows(n - 1, n);  // [1, V]
    for (int64_t g = 0; g < greedy_steps; ++g) {
      ours.emplace_back(last.f32(), last.f32() + V);
      greedy.push_back(argmax_first(ours.back().data(), V));
      if (g + 1 < greedy_steps) last = runner.append({greedy.back()}).clone();
    }
  }
  // The reference on the same tokens, forced to the recorded choices.
  RoutingExcuse r;
  RoutingForcer forcer(recorder.calls);
  SelectionForcer select_forcer(selections.calls);
  {
    std::optional<ScopedRoutingHook> route_scope;
    std::optional<ScopedSelectionHook> select_scope;
    if (routing) route_scope.emplace(reference, &forcer, "routing rule");
    if (selection) select_scope.emplace(reference, &select_forcer, "routing rule");
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
    DSI_CHECK(!r.forced_greedy_match || (forcer.all_used() && select_forcer.all_used()),
              "routing rule: the tested model routed or selected more often than the reference");
  }
  r.decisions = forcer.decisions;
  r.flips = forcer.flips;
  r.selection_rows = select_forcer.rows;
  r.selection_flips = select_forcer.flips;
  decide(r, options.rel_l2_tolerance);
  return r;
}

}  // namespace dsinfer
