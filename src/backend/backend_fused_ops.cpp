// Default implementations of the Backend's fused ops: the primitive ops in the reference's order, so a
// backend that does not fuse (the CPU reference) computes exactly what the unfused model code did.
#include "backend/backend.h"
#include "core/error.h"

namespace dsinfer {

std::vector<Tensor> Backend::norm_linears(const Tensor& x, const Tensor& norm, float eps,
                                          const std::vector<const Linear*>& linears) {
  const Tensor normed = rms_norm(x, norm, eps);  // [T, H]
  std::vector<Tensor> out;
  out.reserve(linears.size());
  for (const Linear* w : linears) out.push_back(linear(normed, *w));  // [T, out_i]
  return out;
}

void Backend::linear_residual(const Tensor& x, const Linear& w, Tensor& residual) {
  add_inplace(residual, linear(x, w));
}

void Backend::norm_mlp_residual(Tensor& residual, const Tensor& norm, float eps, const MlpWeights& w) {
  add_inplace(residual, mlp(rms_norm(residual, norm, eps), w));
}

void Backend::rope_write_kv(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table, RopeLayout layout,
                            KvCache& cache, int64_t layer, const BatchPlan& plan) {
  rope(q, plan.positions, table, 0, layout);
  rope(k, plan.positions, table, 0, layout);
  write_kv(cache, layer, plan, k, v);
}

Tensor Backend::norm_rope_write_kv(const Tensor& q, const Tensor& kv, const Tensor& q_norm,
                                   const Tensor& kv_norm, float eps, const RopeTable& table, KvCache& cache,
                                   int64_t layer, const BatchPlan& plan) {
  DSI_CHECK(q.ndim() == 3 && q.dim(0) == plan.num_tokens() && kv.numel() == q.dim(0) * q.dim(2),
            "norm_rope_write_kv: q ", shape_str(q.shape()), " and kv ", shape_str(kv.shape()), " for ",
            plan.num_tokens(), " tokens");
  const int64_t T = q.dim(0), D = q.dim(2), R = table.rope_dim;
  Tensor qn = rms_norm(q, q_norm, eps);  // [T, H, D]
  rope(qn, plan.positions, table, D - R, RopeLayout::kInterleaved);
  Tensor kvn = rms_norm(kv, kv_norm, eps).reshape({T, 1, D});  // [T, 1, D]
  rope(kvn, plan.positions, table, D - R, RopeLayout::kInterleaved);
  write_kv(cache, layer, plan, kvn, Tensor());
  return qn;
}

Tensor Backend::attention_v4_unrope(const Tensor& q, const KvCache& cache, int64_t window_layer,
                                    int64_t window, int64_t comp_layer, int64_t ratio, const Tensor& selected,
                                    const BatchPlan& plan, const Tensor& sinks, float scale,
                                    const RopeTable& table) {
  Tensor o = attention_v4(q, cache, window_layer, window, comp_layer, ratio, selected, plan, sinks,
                          scale);  // [T, H, D]
  rope(o, plan.positions, table, o.dim(2) - table.rope_dim, RopeLayout::kInterleaved, /*inverse=*/true);
  return o;
}

Tensor Backend::hc_post_pre(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                            const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps,
                            Tensor* streams, Tensor* post_out, Tensor* comb_out) {
  Tensor s = hc_post(x, y, post, comb);                        // [T, n, H]
  Tensor p, c;                                                 // [T, n], [T, n, n]
  Tensor out = hc_pre(s, w, iters, hc_eps, norm_eps, &p, &c);  // [T, H]
  *streams = std::move(s);
  *post_out = std::move(p);
  *comb_out = std::move(c);
  return out;
}

Tensor Backend::rope_attention_gqa(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table,
                                   RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan,
                                   int64_t v_head_dim, float scale) {
  DSI_CHECK(q.ndim() == 3 && k.ndim() == 3, "rope_attention_gqa: q ", shape_str(q.shape()), " and k ",
            shape_str(k.shape()), " must be [T, heads, head_dim]");
  rope_write_kv(q, k, v, table, layout, cache, layer, plan);
  return attention_gqa(q, cache, layer, plan, k.dim(1), q.dim(2), v_head_dim, scale);  // [T, Hq * Dv]
}

void Backend::mla_rope_write_kv(Tensor& q_pe, Tensor& k_pe, const Tensor& latent, const Tensor& norm,
                                float eps, const RopeTable& table, RopeLayout layout, KvCache& cache,
                                int64_t layer, const BatchPlan& plan) {
  const Tensor normed = rms_norm(latent, norm, eps);  // [T, R]
  rope(q_pe, plan.positions, table, 0, layout);
  rope(k_pe, plan.positions, table, 0, layout);
  write_kv(cache, layer, plan, normed, k_pe);
}

Tensor Backend::mla_prepare(const Tensor& q_nope, const Tensor& w_uk, Tensor& q_pe, Tensor& k_pe,
                            const Tensor& latent, const Tensor& norm, float eps, const RopeTable& table,
                            RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan) {
  mla_rope_write_kv(q_pe, k_pe, latent, norm, eps, table, layout, cache, layer, plan);
  return head_matmul(q_nope, w_uk, /*transpose_w=*/true);  // [T, H, R]
}

Tensor Backend::attention_mla_uv(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                                 const BatchPlan& plan, float scale, const Tensor& w_uv) {
  const Tensor o_lat = attention_mla(q_lat, q_pe, cache, layer, plan, scale);  // [T, H, R]
  return head_matmul(o_lat, w_uv, /*transpose_w=*/false);                      // [T, H, V]
}

Tensor Backend::norm_moe_route(const Tensor& h, const Tensor& norm, float eps, const Tensor& router,
                               const Tensor& bias, const RoutingParams& p,
                               const std::vector<MlpWeights>& experts, Tensor* ids, Tensor* weights,
                               MoeDispatch* dispatch) {
  if (dispatch) *dispatch = MoeDispatch{};
  Tensor x = rms_norm(h, norm, eps);            // [T, H]
  moe_route(x, router, bias, p, ids, weights);  // [T, k], [T, k]
  return x;
}

void Backend::moe_experts_residual(Tensor& residual, const Tensor& x, const Tensor& ids,
                                   const Tensor& weights, const std::vector<MlpWeights>& experts,
                                   const MoeDispatch* dispatch, const MoeSharedExperts* shared) {
  if (shared) norm_mlp_residual(residual, shared->norm, shared->eps, *shared->mlp);  // the model's old order
  add_inplace(residual, moe_experts(x, ids, weights, experts));
}

CompressedRows v4_closing_rows(const BatchPlan& plan, int64_t ratio) {
  DSI_CHECK(ratio > 0, "compressor ratio must be positive");
  CompressedRows rows;
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    const int64_t end = plan.context_lens[s], begin = end - plan.query_len(s);
    for (int64_t j = begin / ratio; j < end / ratio; ++j) {
      rows.seqs.push_back(s);
      rows.rows.push_back(static_cast<int32_t>(j));
    }
  }
  return rows;
}

void Backend::compress_close(KvCache& cache, const BatchPlan& plan, const CompressCloseSpec& spec) {
  DSI_CHECK(spec.ape && spec.norm && spec.rope, "compress_close: the spec needs ape, norm and rope");
  const CompressedRows rows = v4_closing_rows(plan, spec.ratio);
  if (rows.size() == 0) return;
  Tensor pooled =
      compress_rows(cache, spec.in_layer, plan, rows, *spec.ape, spec.ratio, spec.overlap);  // [R, D]
  const int64_t R = pooled.dim(0), D = pooled.dim(1);
  pooled = rms_norm(pooled, *spec.norm, spec.eps).reshape({R, 1, D});  // [R, 1, D]
  std::vector<int32_t> starts(static_cast<size_t>(R));
  for (int64_t k = 0; k < R; ++k) starts[k] = static_cast<int32_t>(rows.rows[k] * spec.ratio);
  rope(pooled, starts, *spec.rope, D - spec.rope->rope_dim, RopeLayout::kInterleaved);
  write_compressed(cache, spec.out_layer, plan, rows, pooled);
}

}  // namespace dsinfer
