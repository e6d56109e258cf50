// run_routing_check: record the tested model's routing, replay it on the reference (see routing_check.h).
#include "engine/routing_check.h"

#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/routing_hooks.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

double rel_l2(const Tensor& a, const Tensor& ref) {
  DSI_CHECK(a.shape() == ref.shape(), "routing check: logits of shapes ", shape_str(a.shape()), " and ",
            shape_str(ref.shape()));
  return rel_l2_error(a.f32(), ref.f32(), a.numel());
}

// All prompt rows' logits [tokens, vocab] of one run, with `hook` in place for its duration.
Tensor prompt_logits(Model& model, MoeRoutingHook* hook, const std::vector<int32_t>& prompt, int64_t chunk) {
  DSI_CHECK(model.set_moe_routing_hook(hook), "routing check: the model has no MoE routing to check");
  struct Unhook {
    Model& m;
    ~Unhook() { m.set_moe_routing_hook(nullptr); }
  } unhook{model};
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()) + 1);
  return runner.append(prompt, /*all_logits=*/true, chunk);
}

}  // namespace

std::vector<RoutingCheckCase> run_routing_check(Model& tested, Model& reference,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t prefill_chunk) {
  std::vector<RoutingCheckCase> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RoutingRecorder recorder;
    const Tensor tested_logits = prompt_logits(tested, &recorder, prompts[i], prefill_chunk);  // [n, V]
    const Tensor free_logits = prompt_logits(reference, nullptr, prompts[i], prefill_chunk);   // [n, V]
    RoutingForcer forcer(recorder.calls);
    const Tensor forced_logits = prompt_logits(reference, &forcer, prompts[i], prefill_chunk);  // [n, V]
    DSI_CHECK(forcer.all_used(), "routing check: the tested model routed more often than the reference");
    RoutingCheckCase c;
    c.index = static_cast<int>(i);
    c.tokens = static_cast<int64_t>(prompts[i].size());
    c.decisions = forcer.decisions;
    c.flipped = forcer.flipped;
    c.flips = forcer.flips;
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
    j.push_back({{"case", c.index},
                 {"tokens", c.tokens},
                 {"decisions", c.decisions},
                 {"flipped", c.flipped},
                 {"flips", flips_json(c.flips)},
                 {"free_rel_l2", c.free_rel_l2},
                 {"forced_rel_l2", c.forced_rel_l2}});
  }
  return j;
}

}  // namespace dsinfer
