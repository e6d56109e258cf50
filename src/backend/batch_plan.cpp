// Consistency checks of a BatchPlan (cheap; run before every CPU forward).
#include "backend/batch_plan.h"

#include "core/error.h"

namespace dsinfer {

void BatchPlan::validate(int64_t num_cache_blocks) const {
  const int32_t S = num_seqs();
  DSI_CHECK(positions.size() == token_ids.size(), "BatchPlan: positions/tokens size mismatch");
  DSI_CHECK(slot_mapping.size() == token_ids.size(), "BatchPlan: slot_mapping/tokens size mismatch");
  DSI_CHECK(
      static_cast<int32_t>(cu_seqlens.size()) == S + 1 && cu_seqlens[0] == 0 && cu_seqlens[S] == num_tokens(),
      "BatchPlan: cu_seqlens inconsistent with tokens");
  DSI_CHECK(static_cast<int32_t>(block_table_indptr.size()) == S + 1, "BatchPlan: block_table_indptr size");
  DSI_CHECK(block_size > 0, "BatchPlan: block_size must be positive");
  for (int32_t s = 0; s < S; ++s) {
    DSI_CHECK(cu_seqlens[s + 1] >= cu_seqlens[s], "BatchPlan: cu_seqlens not increasing");
    DSI_CHECK(context_lens[s] >= query_len(s), "BatchPlan: context shorter than its new tokens");
    int64_t blocks = block_table_indptr[s + 1] - block_table_indptr[s];
    DSI_CHECK(blocks * block_size >= context_lens[s], "BatchPlan: sequence ", s, " has ", blocks,
              " blocks for ", context_lens[s], " tokens");
    for (int32_t b = block_table_indptr[s]; b < block_table_indptr[s + 1]; ++b) {
      DSI_CHECK(block_table[b] >= 0 && block_table[b] < num_cache_blocks, "BatchPlan: block id ",
                block_table[b], " out of range");
    }
  }
  DSI_CHECK(prompt_lens.empty() || static_cast<int32_t>(prompt_lens.size()) == S,
            "BatchPlan: prompt_lens must be empty or hold one length per sequence");
  for (int32_t s = 0; s < S && !prompt_lens.empty(); ++s) {
    DSI_CHECK(prompt_lens[s] >= context_lens[s], "BatchPlan: prefill target of sequence ", s,
              " is shorter than its context");
  }
  DSI_CHECK(prev_sample_rows.empty() || prev_sample_rows.size() == token_ids.size(),
            "BatchPlan: prev_sample_rows must be empty or hold one entry per token");
  for (int32_t r : prev_sample_rows) DSI_CHECK(r >= -1, "BatchPlan: bad previous sample row ", r);
  for (int32_t row : logits_rows) DSI_CHECK(row >= 0 && row < num_tokens(), "BatchPlan: bad logits row");
}

}  // namespace dsinfer
