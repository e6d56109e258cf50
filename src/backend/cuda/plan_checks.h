// Host-side checks of a step's BatchPlan and KV cache shared by CudaBackend's attention ops: the kernels
// index the sequences' block tables with the plan's positions, so a position past its sequence's blocks must
// be refused before any launch, and write the slots the plan names, which must lie in the cache; and the
// checked device view of one cache layer. Header-only glue of
// dsinfer_lib.
#pragma once
#include <cstdint>

#include "backend/batch_plan.h"
#include "backend/cuda/attention_kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kv/kv_cache.h"

namespace dsinfer::cuda {

// Every token's position lies within its sequence's blocks.
inline void check_positions(const BatchPlan& plan, const char* op) {
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    const int64_t blocks = plan.block_table_indptr[s + 1] - plan.block_table_indptr[s];
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t)
      DSI_CHECK(plan.positions[t] >= 0 && plan.positions[t] < blocks * plan.block_size, op, ": position ",
                plan.positions[t], " of sequence ", s, " is past its ", blocks, " blocks");
  }
}

// The plan names one cache slot per token, each within the cache.
inline void check_slots(const KvCache& cache, const BatchPlan& plan, const char* op) {
  DSI_CHECK(static_cast<int64_t>(plan.slot_mapping.size()) == plan.num_tokens(), op, ": slot_mapping has ",
            plan.slot_mapping.size(), " entries for ", plan.num_tokens(), " tokens");
  const int64_t slots = cache.num_blocks() * cache.block_size();
  for (int64_t s : plan.slot_mapping) DSI_CHECK(s >= 0 && s < slots, op, ": slot ", s, " outside the cache");
}

// Layer `layer` of a GPU cache (float32 or bf16 rows) as the kernels take it.
inline DeviceCacheView cache_view(const KvCache& cache, int64_t layer, const char* op) {
  DSI_CHECK(cache.device() == Device::kCuda, op, ": the KV cache is not on the GPU");
  DSI_CHECK(cache.dtype() == DType::F32 || cache.dtype() == DType::BF16, op, ": KV cache of ",
            dtype_name(cache.dtype()));
  DSI_CHECK(layer >= 0 && layer < cache.num_layers(), op, ": layer ", layer, " of ", cache.num_layers());
  DeviceCacheView v;
  v.data = const_cast<void*>(cache.storage(layer).raw());
  v.width = cache.width(layer);
  v.bf16 = cache.dtype() == DType::BF16;
  return v;
}

}  // namespace dsinfer::cuda
