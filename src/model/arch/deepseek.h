// DeepSeek-V2 / V3 (and the MLA + MoE trunk V3.2 shares): multi-head latent attention with an absorbed
// decode path over the 576-wide latent cache, and DeepSeekMoE with shared experts. V3.2 plugs its lightning
// indexer in as an MlaTokenSelector.
#pragma once
#include <memory>
#include <vector>

#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

// Picks, per query token, the cache positions an MLA layer attends to (DeepSeek-V3.2's indexer). Without
// one, every layer's MLA is dense and causal.
class MlaTokenSelector {
 public:
  virtual ~MlaTokenSelector() = default;
  // The selector's own cache entries. They follow the model's num_layers MLA entries: selector entry i is
  // cache entry num_layers + i.
  virtual std::vector<KvLayerSpec> kv_layout() const = 0;
  // For MLA layer `layer`: x [T, hidden] is the attention input (after input_layernorm), q_resid [T, q_lora]
  // the normalised compressed query. Writes the selector's cache rows of the new tokens and returns the
  // positions each token attends to, [T, K] (I32, -1 = unused). `hook` (optional) is shown the scores'
  // inputs before the selection (IndexSelectionHook::on_index_inputs).
  virtual Tensor select(int64_t layer, const Tensor& x, const Tensor& q_resid, const BatchPlan& plan,
                        KvCache& cache, IndexSelectionHook* hook) = 0;
};

// `selector` (optional) makes the attention sparse; it needs a config with q_lora_rank.
std::unique_ptr<Model> make_deepseek_model(const ModelConfig& config, WeightLoader& weights, Backend& backend,
                                           std::unique_ptr<MlaTokenSelector> selector = nullptr);

}  // namespace dsinfer
