// Routing keyed by (sequence, position) for batch agreement's routing rule: SequenceRoutingLog records every
// MoE decision of a batched engine run (the engine's BatchPlan says which sequence and position each routed
// row is, MoeRoutingHook::on_step), and hands one sequence's decisions back as the call list a
// RoutingForcer replays; RoutingComparer watches a one-at-a-time run of that sequence and judges each of
// its decisions that differs from the log's against its own selection scores (engine/routing_margin.h).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "engine/routing_margin.h"
#include "model/moe_routing_hook.h"

namespace dsinfer {

// One routed row: its expert ids [k] (as the backend ordered them) and their weights [k].
struct RoutingDecision {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

class SequenceRoutingLog : public MoeRoutingHook {
 public:
  // `inner` (may be null) sees every call first and may change the routing (tests plant flips with it);
  // the log records what it leaves.
  explicit SequenceRoutingLog(MoeRoutingHook* inner = nullptr) : inner_(inner) {}

  void on_step(const BatchPlan& plan) override;
  void on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                       const Tensor& bias, const RoutingParams& params) override;
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override;

  // The decision of (seq, position, layer), or null when none was recorded (a row served from the prefix
  // cache, or a dense layer). A row run twice (a preempted sequence recomputed) keeps its latest decision.
  const RoutingDecision* find(int64_t seq, int64_t position, int64_t layer) const;
  // The MoE layers seen, ascending.
  std::vector<int64_t> layers() const;
  // RoutingForcer's call list for a one-at-a-time run of `seq` in passes [begin, end) of positions: per
  // pass, per MoE layer, ([rows, k] I32 ids, [rows, k] F32 weights). Throws when a decision is missing.
  std::vector<std::pair<Tensor, Tensor>> forced_calls(
      int64_t seq, const std::vector<std::pair<int64_t, int64_t>>& passes) const;

 private:
  MoeRoutingHook* inner_;
  std::vector<int64_t> row_seq_, row_pos_;  // [T] of the current pass
  std::map<int64_t, bool> layers_;
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, RoutingDecision>> log_;  // (seq, pos) -> layer
};

// Watches a one-at-a-time run of sequence `seq` (rows numbered by their plan positions) and compares each
// decision at a position <= `last_position` with `log`'s; a differing one is judged with this run's own
// selection scores (its router input, router and bias brought to the host). The routing is not changed.
class RoutingComparer : public MoeRoutingHook {
 public:
  RoutingComparer(const SequenceRoutingLog& log, int64_t seq, int64_t last_position)
      : log_(log), seq_(seq), last_(last_position) {}

  void on_step(const BatchPlan& plan) override { positions_ = plan.positions; }
  void on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                       const Tensor& bias, const RoutingParams& params) override;
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override;

  int64_t decisions = 0;           // compared (both runs decided)
  int64_t missing = 0;             // this run decided, the log has nothing there
  std::vector<RoutingFlip> flips;  // token = the position; judged on this run's scores

 private:
  const SequenceRoutingLog& log_;
  int64_t seq_, last_;
  std::vector<int32_t> positions_;
  Tensor x_, router_, bias_;  // the current layer's inputs as the backend holds them
  RoutingParams params_;
};

}  // namespace dsinfer
