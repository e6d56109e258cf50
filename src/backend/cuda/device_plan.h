// DevicePlan: the device copy of one step's BatchPlan arrays (plus what kernels derive from them), as raw
// pointers kernels can take (CUDA-header free). Uploaded once per step by cuda::StepPlan; the addresses
// stay fixed from step to step, so CUDA graphs captured over them replay with the next step's contents.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

struct DevicePlan {
  const int32_t* token_ids = nullptr;           // [T]
  const int32_t* positions = nullptr;           // [T] position of each token in its sequence
  const int32_t* token_seq = nullptr;           // [T] sequence index of each token
  const int32_t* cu_seqlens = nullptr;          // [S + 1]
  const int32_t* context_lens = nullptr;        // [S] tokens in the cache after the step
  const int32_t* block_table_indptr = nullptr;  // [S + 1] offsets into block_table
  const int32_t* block_table = nullptr;         // block ids of every sequence, concatenated
  const int64_t* slot_mapping = nullptr;        // [T] cache slot of each new token
  const int32_t* logits_rows = nullptr;         // [R] tokens whose logits are wanted
  const int32_t* prev_sample_rows = nullptr;  // [T] row of the previous sampling call feeding token t, or -1
  // Steps where some sequence has at least mla_prefill_min_query() query tokens (never a decode-only step,
  // hence never a captured one; null and 0 otherwise): the MLA split of the step by sequence.
  const int32_t* mla_rows = nullptr;    // [num_mla_rows] tokens of the other sequences (split decode kernel)
  const int32_t* mla_blocks = nullptr;  // [num_mla_blocks] first token of each multi-query block
  int32_t num_mla_rows = 0;
  int32_t num_mla_blocks = 0;
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t num_logits_rows = 0;
  int32_t block_size = 0;
  int32_t max_context = 0;  // longest context_lens entry (or the graph bucket's bound, which is larger)
};

}  // namespace dsinfer::cuda
