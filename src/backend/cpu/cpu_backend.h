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
  void write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                const Tensor& b) override;
  Tensor attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                       int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) override;
  Tensor attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                       const BatchPlan& plan, float scale) override;
  Tensor head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) override;
  void moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p,
                 Tensor* ids, Tensor* weights) override;
  Tensor moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const std::vector<MlpWeights>& experts) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows) override;

  // DeepSeek-V4: cpu_v4_hc.cpp (hyper-connections), cpu_v4_moe.cpp, cpu_v4_attention.cpp (compressors,
  // indexer, sliding + compressed attention).
  Tensor hc_expand(const Tensor& x, int64_t n) override;
  Tensor hc_pre(const Tensor& x, const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps,
                Tensor* post, Tensor* comb) override;
  Tensor hc_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb) override;
  Tensor hc_head(const Tensor& x, const HyperConnWeights& w, float hc_eps, float norm_eps) override;
  Tensor table_rows(const Tensor& table, const std::vector<int32_t>& ids) override;
  Tensor moe_weights_for(const Tensor& x, const Tensor& router, const Tensor& ids,
                         const RoutingParams& p) override;
  Tensor compress_rows(const KvCache& cache, int64_t in_layer, const BatchPlan& plan,
                       const CompressedRows& rows, const Tensor& ape, int64_t ratio, bool overlap) override;
  void write_compressed(KvCache& cache, int64_t layer, const BatchPlan& plan, const CompressedRows& rows,
                        const Tensor& values) override;
  Tensor indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                      const BatchPlan& plan, int64_t ratio, int64_t top_k, float scale,
                      float weights_scale) override;
  Tensor attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                      int64_t comp_layer, int64_t ratio, const Tensor& selected, const BatchPlan& plan,
                      const Tensor& sinks, float scale) override;

  // DeepSeek-V3.2: cpu_layer_norm.cpp, cpu_indexer.cpp, cpu_sparse_attention.cpp.
  // Which of equally scored keys the indexers (V3.2's dsa_indexer_topk and V4's indexer_topk) keep at their
  // top-k boundary: torch.topk's choice on the CPU (the default: the bundled goldens come from transformers
  // on the CPU) or the lowest positions (torch.topk on CUDA, and the CUDA backend; its cross-checks set
  // this).
  enum class IndexTies { kTorchCpu, kLowestPosition };
  void set_index_ties(IndexTies ties) { index_ties_ = ties; }
  // Whether cache writes (write_kv, write_compressed) round the stored values to bf16, as the CUDA backend's
  // bf16 cache does (off by default: float32 rows). With the GPU's tie rule, the CPU then computes what the
  // GPU computes up to float32 rounding: the reference of the GPU's model-level checks.
  void set_bf16_cache_values(bool on) { bf16_cache_values_ = on; }
  Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  Tensor dsa_indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                          const BatchPlan& plan, float scale, float weight_scale, int64_t top_k) override;
  Tensor attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                              const BatchPlan& plan, const Tensor& selected, float scale) override;

 private:
  // Rounds row[0, n) to bf16 values when bf16_cache_values_.
  void round_cache_row(float* row, int64_t n) const;
  IndexTies index_ties_ = IndexTies::kTorchCpu;
  bool bf16_cache_values_ = false;
};

}  // namespace dsinfer
