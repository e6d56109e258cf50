// The fp32 CPU reference backend: straightforward, exact implementations of every backend op,
// parallel over the available cores with OpenMP where that is cheap.
#pragma once
#include "backend/backend.h"

namespace dsinfer {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Tensor embed(const Tensor& table, const std::vector<int32_t>& ids) override;
  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override;
  Tensor linear(const Tensor& x, const Linear& w) override;
  void add_inplace(Tensor& a, const Tensor& b) override;
  void rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table, int64_t offset,
            RopeLayout layout, bool inverse) override;
  Tensor mlp(const Tensor& x, const MlpWeights& w) override;
  void write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a, const Tensor& b) override;
  Tensor attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                       int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) override;
  Tensor attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                       const BatchPlan& plan, float scale) override;
  Tensor head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) override;
  void moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p, Tensor* ids,
                 Tensor* weights) override;
  Tensor moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const std::vector<MlpWeights>& experts) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows) override;
  Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  Tensor indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                      const BatchPlan& plan, float scale, float weight_scale, int64_t top_k) override;
  Tensor attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                              const BatchPlan& plan, const Tensor& selected, float scale) override;
};

}  // namespace dsinfer
