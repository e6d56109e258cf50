// DeepSeek-V4 compressor step over the paged cache (see the header).
#include "model/arch/deepseek_v4_compressor.h"

#include "core/error.h"

namespace dsinfer {

void run_v4_compressor(Backend& b, const V4CompressorWeights& w, const V4CompressorStep& step,
                       const RopeTable& rope, const Tensor& kv, const Tensor& gate, const BatchPlan& plan,
                       KvCache& cache) {
  DSI_CHECK(rope.rope_dim == step.rope_dim, "deepseek_v4 compressor: a rope table of ", rope.rope_dim,
            " dims for rope_dim ", step.rope_dim);
  b.write_kv(cache, step.in_layer, plan, kv, gate);  // rows [kv | gate]
  CompressCloseSpec spec;
  spec.in_layer = step.in_layer;
  spec.out_layer = step.out_layer;
  spec.ratio = step.ratio;
  spec.overlap = step.overlap;
  spec.ape = &w.ape;
  spec.norm = &w.norm;
  spec.eps = step.rms_eps;
  spec.rope = &rope;
  b.compress_close(cache, plan, spec);
}

}  // namespace dsinfer
