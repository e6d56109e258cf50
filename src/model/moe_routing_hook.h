// MoeRoutingHook: sees, and may replace, the expert routing of every MoE layer of a forward pass (the
// evaluation tools' teacher-forced comparison: record a GPU run's routing, replay it on the CPU reference).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace dsinfer {

class MoeRoutingHook {
 public:
  virtual ~MoeRoutingHook() = default;
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
