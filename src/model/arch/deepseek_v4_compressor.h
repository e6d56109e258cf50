// The DeepSeek-V4 compressor step shared by CSA / HCA attention and the lightning indexer: stores the new
// tokens' [kv | gate] projections in their sliding cache layer, then pools every window that closes in this
// step (row j closes with token (j + 1) * ratio - 1), normalises it, ropes it at the window's first position
// and writes it to the compressed cache layer (Backend::compress_close). Works for any chunking and any
// number of batched sequences.
#pragma once
#include "backend/backend.h"
#include "model/arch/deepseek_v4_weights.h"

namespace dsinfer {

struct V4CompressorStep {
  int64_t ratio = 0;
  bool overlap = false;    // CSA: windows of 2 * ratio tokens with stride ratio
  int64_t in_layer = -1;   // cache layer of per-token [kv | gate] rows
  int64_t out_layer = -1;  // cache layer of compressed rows
  int64_t rope_dim = 0;    // trailing dims rotated (interleaved pairs)
  float rms_eps = 1e-6f;
};

// kv, gate [T, dim]: the step's tokens' projections of the normed attention input by w.wkv and w.wgate.
void run_v4_compressor(Backend& backend, const V4CompressorWeights& w, const V4CompressorStep& step,
                       const RopeTable& rope, const Tensor& kv, const Tensor& gate, const BatchPlan& plan,
                       KvCache& cache);

}  // namespace dsinfer
