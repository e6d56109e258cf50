// Batch agreement's routing rule: the two replays of one differing prompt and the verdict (see
// agreement_routing.h).
#include "engine/agreement_routing.h"

#include <cmath>

#include "core/error.h"
#include "engine/routing_hooks.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

void decide(AgreementRoutingExcuse& r) {
  r.excused = false;
  if (r.flips.empty()) {
    r.reason = "no routing decision differs between the runs up to the first difference (" +
               std::to_string(r.decisions) + " compared): the difference does not come from routing";
    return;
  }
  if (r.forced_flips.empty()) {
    r.reason =
        std::to_string(r.flips.size()) + " routing decisions differ, but forced to the batched " +
        "routing the one-at-a-time run makes every decision the batched run made: no near tie explains " +
        "the difference";
    return;
  }
  // The root flip that decides: one outside its bound if any, else the one closest to its bound.
  auto excess = [](const RoutingFlip& f) {
    const double e = f.margin - f.bound;
    return std::isnan(e) ? INFINITY : e;
  };
  const RoutingFlip* worst = nullptr;
  for (const RoutingFlip& f : r.forced_flips) {
    if (!worst || (worst->within && !f.within) || (worst->within == f.within && excess(f) > excess(*worst))) {
      worst = &f;
    }
  }
  const std::string at =
      "position " + std::to_string(worst->token) + " layer " + std::to_string(worst->layer);
  if (!worst->within) {
    r.reason = "root routing flip at " + at + " (" + worst->level + " level) has margin " +
               format_numbers("%.3e > bound %.3e", worst->margin, worst->bound) + ": not bf16 noise";
    return;
  }
  if (!r.forced_match && !r.forced_mismatch.excused) {
    r.reason =
        "forced to the batched routing, the one-at-a-time run gives another token at step " +
        std::to_string(r.forced_mismatch.step) +
        format_numbers(" (margin %.3e vs bound %.3e)", r.forced_mismatch.margin, r.forced_mismatch.bound);
    return;
  }
  r.excused = true;
  r.reason = std::to_string(r.flips.size()) + " of " + std::to_string(r.decisions) +
             " routing decisions differ; the " + std::to_string(r.forced_flips.size()) +
             " root flips are all within bf16 noise (closest to its bound: " + at +
             format_numbers(", margin %.3e vs %.3e)", worst->margin, worst->bound) +
             "; forced to the batched routing, the one-at-a-time run gives the batched tokens" +
             (r.forced_match ? "" : " within the margin rule");
}

}  // namespace

nlohmann::json AgreementRoutingExcuse::to_json() const {
  auto list = [](const std::vector<RoutingFlip>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (const RoutingFlip& f : v) {
      nlohmann::json fj = f.to_json();
      fj.erase("token");
      fj["position"] = f.token;
      out.push_back(fj);
    }
    return out;
  };
  nlohmann::json j = {
      {"routing_flips",
       {{"count", flips.size()}, {"decisions", decisions}, {"missing", missing}, {"flips", list(flips)}}},
      {"forced_flips",
       {{"count", forced_flips.size()}, {"decisions", forced_decisions}, {"flips", list(forced_flips)}}},
      {"forced_match", forced_match},
      {"excused_routing", excused},
      {"reason", reason}};
  if (!forced_match) j["forced_mismatch"] = forced_mismatch.to_json();
  return j;
}

AgreementRoutingExcuse judge_agreement_routing(Model& tested, Model& reference,
                                               const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& single,
                                               const std::vector<int32_t>& batched, int step,
                                               const SequenceRoutingLog& batched_log, int64_t seq,
                                               bool margin_rule) {
  const int64_t n = static_cast<int64_t>(prompt.size()), V = tested.config().vocab_size;
  DSI_CHECK(step >= 0 && step < static_cast<int>(single.size()) && step < static_cast<int>(batched.size()),
            "batch agreement: step ", step, " is outside the greedy tokens");
  const int64_t capacity = n + step + 1;
  AgreementRoutingExcuse r;
  // (a) The one-at-a-time run again (the same passes as the first time), comparing its decisions at
  // positions 0 .. n - 1 + step with the batched ones.
  {
    RoutingComparer comparer(batched_log, seq, n - 1 + step);
    ScopedRoutingHook scope(tested, &comparer, "batch agreement");
    SequenceRunner runner(tested, capacity);
    runner.append(prompt);
    for (int g = 0; g < step; ++g) runner.append({single[g]});
    r.decisions = comparer.decisions;
    r.missing = comparer.missing;
    r.flips = comparer.flips;
  }
  if (r.missing > 0) {
    r.reason = std::to_string(r.missing) +
               " decisions of the one-at-a-time run have no batched counterpart " +
               "(rows served from the prefix cache): routing cannot be judged";
    return r;
  }
  // (b) The reference forced to the batched routing, fed the batched tokens, over the same passes.
  std::vector<std::pair<int64_t, int64_t>> passes = {{0, n}};
  for (int g = 0; g < step; ++g) passes.push_back({n + g, n + g + 1});
  const std::vector<std::pair<Tensor, Tensor>> calls = batched_log.forced_calls(seq, passes);
  RoutingForcer forcer(calls);
  {
    ScopedRoutingHook scope(reference, &forcer, "batch agreement");
    SequenceRunner runner(reference, capacity);
    Tensor last = runner.append(prompt).clone();  // [1, V]
    r.forced_match = true;
    for (int g = 0; g <= step; ++g) {
      const int32_t ref_token = argmax_first(last.f32(), V);
      if (ref_token != batched[g]) {
        r.forced_match = false;
        r.forced_mismatch =
            judge_margin(g, batched[g], ref_token, top2_margin(last.f32(), V), "reference_top2",
                         max_abs(last.f32(), V), /*measured_abs_err=*/0.0, margin_rule);
        break;  // the reference would continue from another token
      }
      if (g < step) last = runner.append({batched[g]}).clone();
    }
    DSI_CHECK(!r.forced_match || forcer.all_used(),
              "batch agreement: the forced replay routed less often than the batched run recorded");
  }
  r.forced_decisions = forcer.decisions;
  r.forced_flips = forcer.flips;
  decide(r);
  return r;
}

}  // namespace dsinfer
