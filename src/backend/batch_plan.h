// BatchPlan: everything one forward step needs besides the weights, built by the scheduler (or a simple
// runner) and consumed by every backend. Flat arrays, ready to copy to a device.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer {

struct BatchPlan {
  std::vector<int32_t> token_ids;     // [num_tokens] all sequences' new tokens, sequence after sequence
  std::vector<int32_t> positions;     // [num_tokens] absolute position of each token in its sequence
  std::vector<int32_t> cu_seqlens;    // [num_seqs + 1] offsets of each sequence's tokens in token_ids
  std::vector<int32_t> context_lens;  // [num_seqs] tokens in the cache after this step (cached prefix + new)
  std::vector<int32_t> block_table_indptr;  // [num_seqs + 1] offsets into block_table
  std::vector<int32_t> block_table;         // block ids of each sequence, in order
  std::vector<int64_t>
      slot_mapping;  // [num_tokens] cache slot (block * block_size + offset) of each new token
  std::vector<int32_t> logits_rows;  // token indices whose logits are wanted, in output order
  std::vector<int64_t> seq_ids;      // [num_seqs] sequence ids (for per-sequence cache state)
  // [num_seqs] or empty: the length each sequence reaches once its current prompt is fully prefilled. Lets
  // a chunked prefill reproduce a one-shot prefill where a result depends on the whole prompt's length
  // (the CPU DeepSeek-V3.2 and V4 indexers break top-k ties as torch does over a full-prompt row).
  // Empty: context_lens.
  std::vector<int32_t> prompt_lens;
  // [num_tokens] or empty (async scheduling): r >= 0 when token t is the token the previous
  // Backend::sample_async call sampled in its row r (token_ids[t] is then a placeholder until
  // Backend::feed_sampled_tokens resolves it, on the host or on the device), -1 for a known token.
  std::vector<int32_t> prev_sample_rows;
  int32_t block_size = 64;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }
  int32_t query_len(int32_t seq) const { return cu_seqlens[seq + 1] - cu_seqlens[seq]; }
  // prompt_lens[seq], or context_lens[seq] when not given.
  int32_t prompt_len(int32_t seq) const { return prompt_lens.empty() ? context_lens[seq] : prompt_lens[seq]; }
  // Whether some token is fed from the previous sample call (prev_sample_rows).
  bool feeds_sampled_tokens() const {
    for (int32_t r : prev_sample_rows)
      if (r >= 0) return true;
    return false;
  }
  // Cache slot holding position `pos` of sequence `seq`.
  int64_t slot_of(int32_t seq, int64_t pos) const {
    return static_cast<int64_t>(block_table[block_table_indptr[seq] + pos / block_size]) * block_size +
           pos % block_size;
  }
  // Throws dsinfer::Error when the arrays are inconsistent with each other or with the cache.
  void validate(int64_t num_cache_blocks) const;
};

}  // namespace dsinfer
