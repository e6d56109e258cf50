// run_routing_check: record the tested model's routing, replay it on the reference (see routing_check.h).
#include "engine/routing_check.h"

#include <optional>

#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/routing_hooks.h"
#include "engine/routing_rule.h"
#include "engine/selection_hooks.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

double rel_l2(const Tensor& a, const Tensor& ref) {
  DSI_CHECK(a.shape() == ref.shape(), "routing check: logits of shapes ", shape_str(a.shape()), " and ",
            shape_str(ref.shape()));
  return rel_l2_error(a.f32(), ref.f32(), a.numel());
}

// All prompt rows' logits [tokens, vocab] of one run, with `route` and `select` (each may be null) in place
// for its duration on the hooks the model has.
Tensor prompt_logits(Model& model, MoeRoutingHook* route, IndexSelectionHook* select,
                     const std::vector<int32_t>& prompt, int64_t chunk) {
  std::optional<ScopedRoutingHook> route_scope;
  std::optional<ScopedSelectionHook> select_scope;
  if (has_moe_routing(model)) route_scope.emplace(model, route, "routing check");
  if (has_index_selection(model)) select_scope.emplace(model, select, "routing check");
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()) + 1);
  return runner.append(prompt, /*all_logits=*/true, chunk);
}

}  // namespace

std::vector<RoutingCheckCase> run_routing_check(Model& tested, Model& reference,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t prefill_chunk) {
  DSI_CHECK(has_discrete_choices(tested), "routing check: the model has no MoE routing or indexer to check");
  std::vector<RoutingCheckCase> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RoutingRecorder recorder;
    SelectionRecorder selections;
    const Tensor tested_logits =
        prompt_logits(tested, &recorder, &selections, prompts[i], prefill_chunk);  // [n, V]
    const Tensor free_logits =
        prompt_logits(reference, nullptr, nullptr, prompts[i], prefill_chunk);  // [n, V]
    RoutingForcer forcer(recorder.calls);
    SelectionForcer select_forcer(selections.calls);
    const Tensor forced_logits =
        prompt_logits(reference, &forcer, &select_forcer, prompts[i], prefill_chunk);  // [n, V]
    DSI_CHECK(forcer.all_used() && select_forcer.all_used(),
              "routing check: the tested model routed or selected more often than the reference");
    RoutingCheckCase c;
    c.index = static_cast<int>(i);
    c.tokens = static_cast<int64_t>(prompts[i].size());
    c.decisions = forcer.decisions;
    c.flipped = forcer.flipped;
    c.flips = forcer.flips;
    c.selections = select_forcer.rows;
    c.selections_differ = select_forcer.rows_differ;
    c.selection_flips = select_forcer.flips;
    c.free_rel_l2 = rel_l2(tested_logits, free_logits);
    c.forced_rel_l2 = rel_l2(tested_logits, forced_logits);
    out.push_back(c);
  }
  return out;
}

nlohmann::json flips_json(const std::vector<RoutingFlip>& flips) {
  nlohmann::json j = nlohmann::json::array();
  for (const RoutingFlip& f : flips) j.push_back(f.to_json());
  return j;
}

nlohmann::json routing_check_json(const std::vector<RoutingCheckCase>& cases) {
  nlohmann::json j = nlohmann::json::array();
  for (const RoutingCheckCase& c : cases) {
    nlohmann::json cj = {{"case", c.index},
                         {"tokens", c.tokens},
                         {"decisions", c.decisions},
                         {"flipped", c.flipped},
                         {"flips", flips_json(c.flips)},
                         {"free_rel_l2", c.free_rel_l2},
                         {"forced_rel_l2", c.forced_rel_l2}};
    if (c.selections > 0) {
      nlohmann::json rows = nlohmann::json::array();
      for (const SelectionFlip& f : c.selection_flips) rows.push_back(f.to_json());
      cj["selections"] = c.selections;
      cj["selections_differ"] = c.selections_differ;
      cj["selection_flips"] = rows;
    }
    j.push_back(cj);
  }
  return j;
}

}  // namespace dsinfer
