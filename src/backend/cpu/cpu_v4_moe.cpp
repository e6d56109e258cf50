// CPU reference DeepSeek-V4 hash-routed MoE: the experts are given (tid2eid[token], table_rows), the router
// still scores them; weights are the chosen scores normalised and scaled, as transformers' hash router does.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

Tensor CpuBackend::table_rows(const Tensor& table, const std::vector<int32_t>& ids) {
  // table [V, k] I32, ids [T] -> [T, k] I32
  DSI_CHECK(table.dtype() == DType::I32 && table.ndim() == 2, "table_rows: the table must be I32 [V, k]");
  const int64_t V = table.dim(0), K = table.dim(1), T = static_cast<int64_t>(ids.size());
  Tensor out = Tensor::empty(DType::I32, {T, K});
  for (int64_t t = 0; t < T; ++t) {
    const int32_t tok = ids[t];
    DSI_CHECK(tok >= 0 && tok < V, "token id ", tok, " is outside the vocabulary [0, ", V, ")");
    std::copy(table.data<int32_t>() + tok * K, table.data<int32_t>() + (tok + 1) * K,
              out.data<int32_t>() + t * K);
  }
  return out;
}

Tensor CpuBackend::moe_weights_for(const Tensor& x, const Tensor& router, const Tensor& ids,
                                   const RoutingParams& p) {
  // x [T, H], router [E, H], ids [T, k] I32 -> weights [T, k]
  const int64_t T = x.dim(0), H = x.dim(1), E = router.dim(0), K = ids.dim(1);
  DSI_CHECK(router.dim(1) == H, "moe_weights_for: router expects ", router.dim(1), " features, got ", H);
  DSI_CHECK(ids.dtype() == DType::I32 && ids.dim(0) == T, "moe_weights_for: ids must be I32 [T, k]");
  std::vector<float> logits(static_cast<size_t>(T * E));
  cpu::gemm_nt(T, E, H, x.f32(), H, router.f32(), H, logits.data(), E);
  Tensor weights = Tensor::empty(DType::F32, {T, K});
  for (int64_t t = 0; t < T; ++t) {
    float* s = logits.data() + t * E;
    if (p.scoring == "softmax") {
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, s[e]);
      for (int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(s[e] - mx));
      for (int64_t e = 0; e < E; ++e) s[e] /= sum;
    } else if (p.scoring == "sigmoid") {
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
    } else if (p.scoring == "sqrtsoftplus") {
      for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(s[e] > 20.0f ? s[e] : std::log1p(std::exp(s[e])));
    } else {
      fail("moe_weights_for: unsupported scoring function ", p.scoring);
    }
    float denom = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = ids.data<int32_t>()[t * K + k];
      DSI_CHECK(e >= 0 && e < E, "moe_weights_for: expert id ", e, " out of range [0, ", E, ")");
      denom += s[e];
    }
    for (int64_t k = 0; k < K; ++k) {
      float w = s[ids.data<int32_t>()[t * K + k]];
      if (p.norm_topk_prob) w /= (denom + 1e-20f);
      weights.f32()[t * K + k] = w * p.routed_scaling_factor;
    }
  }
  return weights;
}

}  // namespace dsinfer
