// MoeRoutingHook: sees, and may replace, the expert routing of every MoE layer of a forward pass (the
// evaluation tools' teacher-forced comparison: record a GPU run's routing, replay it on the CPU reference;
// batch agreement: record the batched engine run's routing per sequence and position).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/batch_plan.h"

namespace dsinfer {

class MoeRoutingHook {
 public:
  virtual ~MoeRoutingHook() = default;
  // Called at the start of every forward pass with its plan: row t of the pass's routing calls is token t
  // of the plan (sequence plan.seq_ids[s] for cu_seqlens[s] <= t < cu_seqlens[s + 1], position
  // plan.positions[t]). Default: nothing (eval batch-agreement keys the batched run's routing by it).
  virtual void on_step(const BatchPlan& plan) {}
  // Called once per MoE layer and forward pass, in layer order, after routing: ids [T, k] I32 and weights
  // [T, k] F32 as the backend returned them. The hook may replace both (same shapes, tensors `backend`
  // takes).
  virtual void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) = 0;
  // Called just before the same layer's routing with its inputs: x [T, H] the router input, router [E, H],
  // bias [E] (or empty) and the routing parameters, all as `backend` holds them (valid until on_route
  // returns). Default: nothing (the routing rule reads the CPU reference's scores here).
  virtual void on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                               const Tensor& bias, const RoutingParams& params) {}
};

}  // namespace dsinfer
