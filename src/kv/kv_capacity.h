// How many KV blocks the engine allocates: from max_tokens_in_paged_kv_cache when set, else from a byte
// budget (a share of the GPU memory left after weights and workspace, or cpu_kv_cache_bytes on the CPU).
#pragma once
#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace dsinfer {

struct KvCapacityRequest {
  int64_t max_tokens = 0;  // > 0 wins over the byte budgets
  bool on_gpu = false;
  int64_t gpu_free_bytes = 0;          // GPU: memory left after weights and workspace
  double gpu_free_mem_fraction = 0.9;  // GPU: share of gpu_free_bytes for the cache
  int64_t cpu_bytes = 0;               // CPU: byte budget
  int32_t block_size = 64;
  int64_t element_bytes = 4;  // bytes per cached value (KvCache::dtype: 4 for F32, 2 for BF16)
};

// Bytes one block of `block_size` tokens takes across all layers with `element_bytes` per value.
int64_t kv_bytes_per_block(const std::vector<KvLayerSpec>& layers, int32_t block_size,
                           int64_t element_bytes = 4);

// Number of blocks (at least 1); throws dsinfer::Error when the budget cannot hold a single block.
int32_t kv_num_blocks(const std::vector<KvLayerSpec>& layers, const KvCapacityRequest& request);

}  // namespace dsinfer
