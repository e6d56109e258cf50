// The two MoeRoutingHooks of teacher-forced routing comparisons: RoutingRecorder keeps host copies of a
// tested model's routing, RoutingForcer replays them on the CPU reference and records every (token, layer)
// decision where the reference's own choice differs, with its margin (engine/routing_margin.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/routing_margin.h"
#include "model/moe_routing_hook.h"

namespace dsinfer {

class Model;

// Installs `hook` on `model` for the scope's duration; `what` names the caller in the error a model without
// MoE routing gives.
class ScopedRoutingHook {
 public:
  ScopedRoutingHook(Model& model, MoeRoutingHook* hook, const char* what);
  ~ScopedRoutingHook();
  ScopedRoutingHook(const ScopedRoutingHook&) = delete;
  ScopedRoutingHook& operator=(const ScopedRoutingHook&) = delete;

 private:
  Model& model_;
};

// printf-style text of one or two numbers (the routing rules' reasons).
std::string format_numbers(const char* format, double a, double b = 0.0);

// Backend::to_host hands back values as F32 (the GPU's I32 expert ids too): `host` ([T, k]) as I32 again,
// each id checked to be a whole number; `what` names the values in the errors.
Tensor host_ids(const Tensor& host, int64_t layer, const char* what = "routing check: expert ids");

// Numbers the rows of a run's forward passes as the forcing hooks see them, across passes (a SequenceRunner's
// prompt rows first, then each later step's): a pass starts when the layer index does not increase.
class RunTokenNumbering {
 public:
  // The run-wide number of row 0 of this call (layer `layer`, `rows` rows).
  int64_t first_token(int64_t layer, int64_t rows) {
    if (layer <= last_layer_) offset_ += last_rows_;  // a new forward pass
    last_layer_ = layer;
    last_rows_ = rows;
    return offset_;
  }

 private:
  int64_t offset_ = 0, last_layer_ = -1, last_rows_ = 0;
};

// Host copies of every routing call of a run, in call order.
class RoutingRecorder : public MoeRoutingHook {
 public:
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override;
  std::vector<std::pair<Tensor, Tensor>> calls;  // ([T, k] I32, [T, k] F32)
};

// Replaces each routing call's result with the recorded one; counts the decisions that differ and judges
// each of them against the reference's own scores. Tokens are numbered across the run's forward passes
// (RunTokenNumbering).
class RoutingForcer : public MoeRoutingHook {
 public:
  explicit RoutingForcer(const std::vector<std::pair<Tensor, Tensor>>& calls) : calls_(calls) {}

  void on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                       const Tensor& bias, const RoutingParams& params) override;
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override;

  bool all_used() const { return next_ == calls_.size(); }
  int64_t decisions = 0, flipped = 0;
  std::vector<RoutingFlip> flips;  // one per flipped decision, in call order

 private:
  const std::vector<std::pair<Tensor, Tensor>>& calls_;
  size_t next_ = 0;
  // The current layer's router inputs (from on_router_input; empty tensors when the model gave none).
  Tensor x_, router_, bias_;
  RoutingParams params_;
  int64_t input_layer_ = -1;
  RunTokenNumbering tokens_;
};

}  // namespace dsinfer
