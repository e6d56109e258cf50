// PlantedModel: a stand-in for a backend that makes one discrete choice differently, for the routing rule's
// tests. It wraps a CPU model and, in every prompt pass (a pass from position 0: each run of the golden check
// and of the rule's replay), replaces one token's row of one layer's MoE routing or indexer selection before
// handing the choice on to the hook the caller installed; logits come back times `logit_scale` (a stand-in
// for kernel error).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/model.h"

namespace dsinfer {

enum class PlantedChoice { kRouting, kSelection };

struct PlantedRow {
  PlantedChoice choice = PlantedChoice::kRouting;
  int64_t layer = -1;        // model layer (-1: plant nothing)
  int64_t token = -1;        // row of the prompt pass
  std::vector<int32_t> row;  // [k] expert ids or [K] kept rows (-1 padded)
};

class PlantedModel : public Model {
 public:
  PlantedModel(Model& inner, PlantedRow plant, float logit_scale = 1.0f)
      : inner_(inner), plant_(std::move(plant)), scale_(logit_scale), routing_(this), selection_(this) {
    if (plant_.choice == PlantedChoice::kRouting) {
      inner_.set_moe_routing_hook(&routing_);
    } else {
      inner_.set_index_selection_hook(&selection_);
    }
  }
  ~PlantedModel() override {
    if (plant_.choice == PlantedChoice::kRouting) {
      inner_.set_moe_routing_hook(nullptr);
    } else {
      inner_.set_index_selection_hook(nullptr);
    }
  }
  PlantedModel(const PlantedModel&) = delete;
  PlantedModel& operator=(const PlantedModel&) = delete;

  const ModelConfig& config() const override { return inner_.config(); }
  std::vector<KvLayerSpec> kv_layout() const override { return inner_.kv_layout(); }
  Tensor forward(const BatchPlan& plan, KvCache& cache) override {
    prompt_pass_ = plan.positions.at(0) == 0;
    Tensor logits = inner_.forward(plan, cache).clone();  // [rows, vocab]
    for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] *= scale_;
    return logits;
  }
  bool set_moe_routing_hook(MoeRoutingHook* hook) override {
    if (plant_.choice != PlantedChoice::kRouting) return inner_.set_moe_routing_hook(hook);
    next_routing_ = hook;
    return true;
  }
  bool set_index_selection_hook(IndexSelectionHook* hook) override {
    if (plant_.choice != PlantedChoice::kSelection) return inner_.set_index_selection_hook(hook);
    next_selection_ = hook;
    return true;
  }

 private:
  // Writes the planted row into `rows` [T, width] when this is the planted layer of a prompt pass.
  void plant(int64_t layer, Tensor& rows) const {
    if (layer != plant_.layer || !prompt_pass_) return;
    rows = rows.clone();
    std::copy(plant_.row.begin(), plant_.row.end(), rows.data<int32_t>() + plant_.token * rows.dim(1));
  }
  struct Routing : MoeRoutingHook {
    explicit Routing(PlantedModel* m) : m(m) {}
    void on_step(const BatchPlan& plan) override {
      if (m->next_routing_) m->next_routing_->on_step(plan);
    }
    void on_router_input(Backend& b, int64_t layer, const Tensor& x, const Tensor& router, const Tensor& bias,
                         const RoutingParams& p) override {
      if (m->next_routing_) m->next_routing_->on_router_input(b, layer, x, router, bias, p);
    }
    void on_route(Backend& b, int64_t layer, Tensor& ids, Tensor& weights) override {
      m->plant(layer, ids);
      if (m->next_routing_) m->next_routing_->on_route(b, layer, ids, weights);
    }
    PlantedModel* m;
  };
  struct Selection : IndexSelectionHook {
    explicit Selection(PlantedModel* m) : m(m) {}
    void on_index_inputs(Backend& b, int64_t layer, const IndexScoreInputs& inputs) override {
      if (m->next_selection_) m->next_selection_->on_index_inputs(b, layer, inputs);
    }
    void on_select(Backend& b, int64_t layer, Tensor& selected) override {
      m->plant(layer, selected);
      if (m->next_selection_) m->next_selection_->on_select(b, layer, selected);
    }
    PlantedModel* m;
  };
  Model& inner_;
  PlantedRow plant_;
  float scale_;
  Routing routing_;
  Selection selection_;
  MoeRoutingHook* next_routing_ = nullptr;
  IndexSelectionHook* next_selection_ = nullptr;
  bool prompt_pass_ = false;
};

}  // namespace dsinfer
