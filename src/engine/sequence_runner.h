// SequenceRunner: runs one sequence through a Model with its own KV cache (prefill, then token by token).
// Used by golden checks, perplexity and single-prompt generation; the batched engine shares the same ops.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace dsinfer {

class SequenceRunner {
 public:
  // Capacity: the most tokens the sequence may hold (defaults to the model's max_position_embeddings).
  explicit SequenceRunner(Model& model, int64_t capacity = 0, int64_t block_size = 64, int64_t seq_id = 0);
  ~SequenceRunner();

  // Appends `tokens` (split into chunks of at most `chunk` tokens when chunk > 0) and returns the logits
  // of every new token ([n, vocab]) when all_logits, else of the last one ([1, vocab]).
  Tensor append(const std::vector<int32_t>& tokens, bool all_logits = false, int64_t chunk = 0);
  // Forgets the sequence (the cache is reused).
  void reset();
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }

 private:
  // prompt_end: the sequence's length once all of the current append's tokens are in.
  Tensor run_chunk(const std::vector<int32_t>& tokens, size_t begin, size_t end, bool all_logits,
                   int64_t prompt_end);
  Model& model_;
  int64_t capacity_;
  int64_t block_size_;
  int64_t seq_id_;
  std::unique_ptr<KvCache> cache_;
  int64_t length_ = 0;
};

}  // namespace dsinfer
