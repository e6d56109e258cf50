// DeepSeek-V4 compressor step over the paged cache (see the header).
#include "model/arch/deepseek_v4_compressor.h"

namespace dsinfer {

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

CompressedRows run_v4_compressor(Backend& b, const V4CompressorWeights& w, const V4CompressorStep& step,
                                 const RopeTable& rope, const Tensor& x, const BatchPlan& plan,
                                 KvCache& cache) {
  b.write_kv(cache, step.in_layer, plan, b.linear(x, w.wkv), b.linear(x, w.wgate));  // rows [kv | gate]
  CompressedRows rows = v4_closing_rows(plan, step.ratio);
  if (rows.size() == 0) return rows;
  Tensor pooled =
      b.compress_rows(cache, step.in_layer, plan, rows, w.ape, step.ratio, step.overlap);  // [R, dim]
  const int64_t R = pooled.dim(0), dim = pooled.dim(1);
  pooled = b.rms_norm(pooled, w.norm, step.rms_eps).reshape({R, 1, dim});  // [R, 1, dim]
  std::vector<int32_t> starts(R);
  for (int64_t k = 0; k < R; ++k) starts[k] = static_cast<int32_t>(rows.rows[k] * step.ratio);
  b.rope(pooled, starts, rope, dim - step.rope_dim, RopeLayout::kInterleaved);
  b.write_compressed(cache, step.out_layer, plan, rows, pooled);
  return rows;
}

}  // namespace dsinfer
