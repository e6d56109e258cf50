// Single-sequence execution over a private paged cache whose blocks are 0..n-1 in order.
#include "engine/sequence_runner.h"

#include <cstring>

#include "core/error.h"

namespace dsinfer {

SequenceRunner::SequenceRunner(Model& model, int64_t capacity, int64_t block_size, int64_t seq_id)
    : model_(model),
      capacity_(capacity > 0 ? capacity : model.config().max_position_embeddings),
      block_size_(block_size),
      seq_id_(seq_id) {
  const int64_t blocks = (capacity_ + block_size_ - 1) / block_size_;
  cache_ =
      std::make_unique<KvCache>(model.kv_layout(), blocks, block_size_, model.kv_device(), model.kv_dtype());
}

SequenceRunner::~SequenceRunner() {
  model_.release_sequence(seq_id_);
}

void SequenceRunner::reset() {
  length_ = 0;
  model_.release_sequence(seq_id_);
}

Tensor SequenceRunner::run_chunk(const std::vector<int32_t>& tokens, size_t begin, size_t end,
                                 bool all_logits, int64_t prompt_end) {
  BatchPlan plan;
  plan.block_size = static_cast<int32_t>(block_size_);
  const int64_t n = static_cast<int64_t>(end - begin);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = length_ + i;
    plan.token_ids.push_back(tokens[begin + i]);
    plan.positions.push_back(static_cast<int32_t>(pos));
    plan.slot_mapping.push_back(pos);  // block b holds positions [b * bs, (b + 1) * bs)
  }
  plan.cu_seqlens = {0, static_cast<int32_t>(n)};
  plan.context_lens = {static_cast<int32_t>(length_ + n)};
  const int32_t blocks = static_cast<int32_t>((length_ + n + block_size_ - 1) / block_size_);
  plan.block_table_indptr = {0, blocks};
  for (int32_t b = 0; b < blocks; ++b) plan.block_table.push_back(b);
  plan.seq_ids = {seq_id_};
  plan.prompt_lens = {static_cast<int32_t>(prompt_end)};
  if (all_logits) {
    for (int64_t i = 0; i < n; ++i) plan.logits_rows.push_back(static_cast<int32_t>(i));
  } else {
    plan.logits_rows.push_back(static_cast<int32_t>(n - 1));
  }
  plan.validate(cache_->num_blocks());
  Tensor logits = model_.forward(plan, *cache_);
  length_ += n;
  return logits;
}

Tensor SequenceRunner::append(const std::vector<int32_t>& tokens, bool all_logits, int64_t chunk) {
  DSI_CHECK(!tokens.empty(), "cannot run an empty token sequence");
  DSI_CHECK(length_ + static_cast<int64_t>(tokens.size()) <= capacity_, "sequence of ",
            length_ + static_cast<int64_t>(tokens.size()), " tokens exceeds the context capacity of ",
            capacity_, " tokens");
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : tokens.size();
  const int64_t prompt_end = length_ + static_cast<int64_t>(tokens.size());
  std::vector<Tensor> parts;
  for (size_t begin = 0; begin < tokens.size(); begin += step) {
    const size_t end = std::min(tokens.size(), begin + step);
    const bool last = end == tokens.size();
    if (all_logits || last) {
      parts.push_back(run_chunk(tokens, begin, end, all_logits, prompt_end));
    } else {
      run_chunk(tokens, begin, end, false, prompt_end);
    }
  }
  if (parts.size() == 1) return parts[0];
  const int64_t V = parts[0].dim(1);
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.dim(0);
  Tensor out = Tensor::empty(DType::F32, {rows, V});
  int64_t r = 0;
  for (const Tensor& p : parts) {
    std::memcpy(out.f32() + r * V, p.f32(), p.nbytes());
    r += p.dim(0);
  }
  return out;
}

}  // namespace dsinfer
