// KV capacity from configuration.
#include "kv/kv_capacity.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace dsinfer {

int64_t kv_bytes_per_block(const std::vector<KvLayerSpec>& layers, int32_t block_size,
                           int64_t element_bytes) {
  int64_t values = 0;
  for (const KvLayerSpec& l : layers) values += l.width * block_size;  // every kind keeps block_size rows
  return std::max<int64_t>(1, values * element_bytes);
}

int32_t kv_num_blocks(const std::vector<KvLayerSpec>& layers, const KvCapacityRequest& r) {
  DSI_CHECK(r.block_size > 0, "kv_block_size must be positive, got ", r.block_size);
  int64_t blocks = 0;
  if (r.max_tokens > 0) {
    blocks = (r.max_tokens + r.block_size - 1) / r.block_size;
  } else {
    const int64_t per_block = kv_bytes_per_block(layers, r.block_size, r.element_bytes);
    int64_t budget = 0;
    if (r.on_gpu) {
      DSI_CHECK(r.gpu_free_mem_fraction > 0.0 && r.gpu_free_mem_fraction <= 1.0,
                "kv_cache_free_gpu_mem_fraction must be in (0, 1], got ", r.gpu_free_mem_fraction);
      budget = static_cast<int64_t>(static_cast<double>(r.gpu_free_bytes) * r.gpu_free_mem_fraction);
    } else {
      budget = r.cpu_bytes;
    }
    blocks = budget / per_block;
    DSI_CHECK(blocks > 0, "the KV cache budget of ", budget, " bytes cannot hold one block of ", r.block_size,
              " tokens (", per_block, " bytes)");
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max() / 2));
}

}  // namespace dsinfer
