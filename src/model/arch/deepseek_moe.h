// DeepSeekMoE weights and evaluation shared by the DeepSeek architectures.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"
#include "model/moe_routing_hook.h"
#include "model/weight_loader.h"

namespace dsinfer {

struct MoeWeights {
  Tensor router;       // [E, H]
  Tensor router_bias;  // [E] e_score_correction_bias (V3) or empty
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
  RoutingParams routing;
};

// Reads `prefix`.gate, .experts (per-expert tensors as on the Hub, or transformers' fused gate_up_proj /
// down_proj), .shared_experts.
MoeWeights load_deepseek_moe(const ModelConfig& config, WeightLoader& w, const std::string& prefix);

// h [T, H] += routed experts (rms_norm(h)) + shared experts (rms_norm(h)), through moe_experts_residual
// with the shared experts: by default norm_mlp_residual (norm and residual add fused) first, the routed
// output added last; the CUDA backend streams the shared experts inside the routed experts' launches at
// decode sizes.
// `hook` (may be null) sees the routing of MoE layer `layer`.
void add_moe_residual(Backend& backend, const MoeWeights& moe, Tensor& h, const Tensor& norm, float eps,
                      MoeRoutingHook* hook = nullptr, int64_t layer = 0);

}  // namespace dsinfer
