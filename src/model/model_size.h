// ModelSize: parameter counts, checkpoint weight bytes and KV-cache bytes per token computed from a config
// alone (no weights needed) — for `dsinfer check`, memory planning and benchmarks.
#pragma once
#include <cstdint>

#include "model/model_config.h"

namespace dsinfer {

struct ModelSize {
  int64_t total_params = 0;   // decoding weights incl. embedding and head (no MTP layers)
  int64_t active_params = 0;  // per token: routed experts counted num_experts_per_tok times
  int64_t decode_params =
      0;  // what one single-token decode step reads: active_params, the embedding as one row
  int64_t checkpoint_weight_bytes = 0;  // in the published format (bf16, or fp8/fp4 + scales)
  int64_t bf16_weight_bytes = 0;        // every weight as bf16 (what the bf16 GPU path holds)
  double kv_bytes_per_token_bf16 = 0;   // cache growth per token, all layers
  double kv_bytes_per_token_fp32 = 0;
  int64_t kv_fixed_bytes_per_sequence_fp32 = 0;  // sliding windows (DeepSeek-V4)
};

ModelSize model_size(const ModelConfig& config);

}  // namespace dsinfer
