// Batch agreement's routing rule (MoE models): a prompt whose batched greedy tokens differ from its
// one-at-a-time tokens beyond the margin rule is excused when the only cause is expert-routing decisions
// that flipped at near ties. With g the first differing step and n the prompt length (decisions at
// positions 0 .. n - 1 + g feed the tokens up to g), excused iff
//   (a) at least one (position, layer) decision at those positions differs between the batched run
//       (recorded in the engine, SequenceRoutingLog) and the one-at-a-time run (replayed with
//       RoutingComparer; reported with its own selection margin and bound, engine/routing_margin.h), and
//       every root flip is within bf16 noise: replaying the prompt one at a time with its routing FORCED to
//       the batched decisions (RoutingForcer on `reference`), the decisions where the replay's own choice
//       differs from the batched one, judged on the replay's own scores. A flip changes the hidden state of
//       every later layer by far more than bf16 noise, so decisions downstream of a flip may differ between
//       the free runs at any margin; forced to the batched routing upstream, the replay sees the batched
//       run's state (up to kernel noise) and only the flips no upstream flip explains remain. At least one
//       must remain (else the difference is not explained by a near tie), and
//   (b) that forced replay, fed the batched tokens, gives the batched token at every step up to g, or its
//       first different token there is excused by the margin rule (judged on the replay's logits).
// The forcer replaces host tensors, so `reference` is the CPU backend (the tested model itself on the CPU;
// the CUDA moe path is not forced).
// docs/architecture.md, "Routing rule".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/margin_rule.h"
#include "engine/routing_log.h"
#include "model/model.h"

namespace dsinfer {

struct AgreementRoutingExcuse {
  int64_t decisions = 0;                  // (position, MoE layer) decisions compared
  int64_t missing = 0;                    // decisions the batched run did not make (prefix-cached rows)
  std::vector<RoutingFlip> flips;         // differing decisions, judged on the one-at-a-time run's scores
  int64_t forced_decisions = 0;           // decisions of the forced replay
  std::vector<RoutingFlip> forced_flips;  // its own choice vs the batched one: the root flips, judged
  bool forced_match = false;              // the forced reference gave the batched tokens up to step g
  GreedyMismatch forced_mismatch;         // its first different token (step -1 when none)
  bool excused = false;
  std::string reason;  // one line: why (not) excused
  // routing_flips {count, decisions, missing, flips: [{position, layer, margin, bound, within, ...}]},
  // forced_flips {count, decisions, flips}, forced_match, forced_mismatch (when any), excused_routing,
  // reason.
  nlohmann::json to_json() const;
};

// Judges prompt `prompt` (sequence `seq` of `batched_log`), whose one-at-a-time tokens `single` and
// batched tokens `batched` first differ at `step`: (a) replays it on `tested` (the one-at-a-time run's
// model, its arithmetic as in that run: the prompt in one pass, then token by token), (b) on `reference`
// (CPU backend; may be `tested` itself when that is the CPU model). `margin_rule`: excuse a forced
// difference within bf16 noise.
AgreementRoutingExcuse judge_agreement_routing(Model& tested, Model& reference,
                                               const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& single,
                                               const std::vector<int32_t>& batched, int step,
                                               const SequenceRoutingLog& batched_log, int64_t seq,
                                               bool margin_rule);

}  // namespace dsinfer
