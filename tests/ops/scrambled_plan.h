// Test helper shared by the CUDA op tests: a BatchPlan over sequences given as (cached tokens, new tokens),
// blocks of `bs` slots handed out in a scrambled order so that block tables are not the identity; the
// block tables depend only on each sequence's total length.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/batch_plan.h"

namespace dsinfer {

inline BatchPlan make_plan(const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t bs,
                           int32_t num_blocks) {
  BatchPlan plan;
  plan.block_size = bs;
  plan.cu_seqlens = {0};
  plan.block_table_indptr = {0};
  int32_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [cached, fresh] = seqs[s];
    const int32_t len = cached + fresh, blocks = (len + bs - 1) / bs;
    for (int32_t b = 0; b < blocks; ++b) plan.block_table.push_back((next++ * 7 + 3) % num_blocks);
    plan.block_table_indptr.push_back(static_cast<int32_t>(plan.block_table.size()));
    for (int32_t p = cached; p < len; ++p) {
      plan.token_ids.push_back(0);
      plan.positions.push_back(p);
      plan.slot_mapping.push_back(plan.slot_of(static_cast<int32_t>(s), p));
    }
    plan.cu_seqlens.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.context_lens.push_back(len);
    plan.seq_ids.push_back(static_cast<int64_t>(s));
  }
  for (int32_t t = 0; t < plan.num_tokens(); ++t) plan.logits_rows.push_back(t);
  plan.validate(num_blocks);
  return plan;
}

}  // namespace dsinfer
