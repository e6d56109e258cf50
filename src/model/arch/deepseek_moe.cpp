// DeepSeekMoE loading and evaluation.
#include "model/arch/deepseek_moe.h"

namespace dsinfer {

MoeWeights load_deepseek_moe(const ModelConfig& c, WeightLoader& w, const std::string& prefix) {
  MoeWeights moe;
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
  moe.router = w.get(prefix + ".gate.weight", {E, H});
  if (w.has(prefix + ".gate.e_score_correction_bias")) {
    // Kept in float32 on every backend: it decides which experts run.
    moe.router_bias = w.get_host(prefix + ".gate.e_score_correction_bias", {E});
  }
  if (w.has(prefix + ".experts.gate_up_proj")) {
    // Views into the fused tensors: expert e's gate rows [2eI, 2eI + I), up rows [2eI + I, 2(e + 1)I).
    Tensor gate_up = w.get(prefix + ".experts.gate_up_proj", {E, 2 * I, H}).reshape({E * 2 * I, H});
    Tensor down = w.get(prefix + ".experts.down_proj", {E, H, I}).reshape({E * H, I});
    for (int64_t e = 0; e < E; ++e) {
      MlpWeights m;
      m.gate.weight = gate_up.rows(2 * e * I, 2 * e * I + I);
      m.up.weight = gate_up.rows(2 * e * I + I, 2 * (e + 1) * I);
      m.down.weight = down.rows(e * H, (e + 1) * H);
      moe.experts.push_back(std::move(m));
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      moe.experts.push_back(w.mlp(prefix + ".experts." + std::to_string(e), H, I));
    }
  }
  if (c.n_shared_experts > 0) {
    moe.has_shared = true;
    moe.shared = w.mlp(prefix + ".shared_experts", H, I * c.n_shared_experts);
  }
  moe.routing.scoring = c.scoring_func;
  moe.routing.method = c.topk_method;
  moe.routing.top_k = c.num_experts_per_tok;
  moe.routing.n_group = c.n_group;
  moe.routing.topk_group = c.topk_group;
  moe.routing.norm_topk_prob = c.norm_topk_prob;
  moe.routing.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  if (moe.routing.method == "noaux_tc" && !moe.router_bias) {
    // transformers registers a zero buffer when the checkpoint has none.
    moe.router_bias = Tensor::zeros(DType::F32, {E});
  }
  if (Backend* b = w.backend()) {
    if (moe.router_bias) moe.router_bias = b->prepare_weight_f32(moe.router_bias);
    b->prepare_experts(moe.experts);
    if (moe.has_shared) b->prepare_shared_experts(moe.shared);
  }
  return moe;
}

void add_moe_residual(Backend& b, const MoeWeights& moe, Tensor& h, const Tensor& norm, float eps,
                      MoeRoutingHook* hook, int64_t layer) {
  Tensor ids, weights;
  MoeSharedExperts shared;  // the shared experts on x = norm(h), when the block has them
  if (moe.has_shared) shared = MoeSharedExperts{&moe.shared, norm, eps};
  if (hook) {
    // The hook sees the router input first and may replace the routing: the separate ops.
    const Tensor x = b.rms_norm(h, norm, eps);  // [T, H]
    hook->on_router_input(b, layer, x, moe.router, moe.router_bias, moe.routing);
    b.moe_route(x, moe.router, moe.router_bias, moe.routing, &ids, &weights);  // [T, k], [T, k]
    hook->on_route(b, layer, ids, weights);
    // h += shared(norm(h)), then h += routed experts(x).
    b.moe_experts_residual(h, x, ids, weights, moe.experts, nullptr, shared.mlp ? &shared : nullptr);
    return;
  }
  // x = norm(h) [T, H], its routing [T, k] x 2 and what the backend precomputed for the experts.
  MoeDispatch dispatch;
  const Tensor x = b.norm_moe_route(h, norm, eps, moe.router, moe.router_bias, moe.routing, moe.experts, &ids,
                                    &weights, &dispatch);
  // h += shared(norm(h)), then h += routed experts(x) (a backend may run both in the same kernels).
  b.moe_experts_residual(h, x, ids, weights, moe.experts, &dispatch, shared.mlp ? &shared : nullptr);
}

}  // namespace dsinfer
