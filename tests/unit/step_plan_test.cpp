// pack_plan (the step plan's host side): every array round-trips, the per-token sequence index is derived,
// and no offset moves when only the block tables grow — what lets a captured CUDA graph replay later steps
// of its bucket (a block table placed earlier once made replays read stale arrays); the MLA step split
// (multi-query blocks of one sequence each, the other tokens in a row list) and that a decode-only step
// packs exactly as before. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/step_plan.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

// A decode step of `blocks.size()` sequences, sequence s holding blocks[s] blocks of 16 slots.
BatchPlan decode_plan(const std::vector<int32_t>& blocks) {
  BatchPlan p;
  p.block_size = 16;
  p.cu_seqlens = {0};
  p.block_table_indptr = {0};
  int32_t next_block = 0;
  for (size_t s = 0; s < blocks.size(); ++s) {
    const int32_t context = blocks[s] * 16 - 3;
    p.token_ids.push_back(static_cast<int32_t>(100 + s));
    p.positions.push_back(context - 1);
    p.cu_seqlens.push_back(static_cast<int32_t>(s + 1));
    p.context_lens.push_back(context);
    for (int32_t b = 0; b < blocks[s]; ++b) p.block_table.push_back(next_block++);
    p.block_table_indptr.push_back(static_cast<int32_t>(p.block_table.size()));
    p.slot_mapping.push_back(static_cast<int64_t>(p.block_table.back()) * 16 + 12);
    p.logits_rows.push_back(static_cast<int32_t>(s));
    p.seq_ids.push_back(static_cast<int64_t>(s));
  }
  return p;
}

template <typename T>
std::vector<T> read(const cuda::PackedPlan& p, size_t offset, size_t n) {
  std::vector<T> out(n);
  EXPECT_LE(offset + n * sizeof(T), p.bytes.size());
  std::memcpy(out.data(), p.bytes.data() + offset, n * sizeof(T));
  return out;
}

TEST(StepPlanTest, ArraysRoundTripWithTheSequenceIndex) {
  const BatchPlan plan = decode_plan({1, 3, 2});
  const cuda::PackedPlan p = cuda::pack_plan(plan);
  EXPECT_EQ(read<int32_t>(p, p.token_ids, 3), plan.token_ids);
  EXPECT_EQ(read<int32_t>(p, p.positions, 3), plan.positions);
  EXPECT_EQ(read<int32_t>(p, p.token_seq, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(read<int64_t>(p, p.slot_mapping, 3), plan.slot_mapping);
  EXPECT_EQ(read<int32_t>(p, p.cu_seqlens, 4), plan.cu_seqlens);
  EXPECT_EQ(read<int32_t>(p, p.context_lens, 3), plan.context_lens);
  EXPECT_EQ(read<int32_t>(p, p.block_table_indptr, 4), plan.block_table_indptr);
  EXPECT_EQ(read<int32_t>(p, p.logits_rows, 3), plan.logits_rows);
  EXPECT_EQ(read<int32_t>(p, p.block_table, 6), plan.block_table);
  for (size_t o : {p.token_ids, p.positions, p.token_seq, p.slot_mapping, p.cu_seqlens, p.context_lens,
                   p.block_table_indptr, p.logits_rows, p.block_table})
    EXPECT_EQ(o % 256, 0u) << "offset " << o;
}

TEST(StepPlanTest, OffsetsDoNotMoveWhenBlockTablesGrow) {
  const cuda::PackedPlan a = cuda::pack_plan(decode_plan({1, 1, 1, 1}));
  const cuda::PackedPlan b = cuda::pack_plan(decode_plan({40, 9, 77, 2}));  // 128 table entries, not 4
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.token_seq, b.token_seq);
  EXPECT_EQ(a.slot_mapping, b.slot_mapping);
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
  EXPECT_EQ(a.context_lens, b.context_lens);
  EXPECT_EQ(a.block_table_indptr, b.block_table_indptr);
  EXPECT_EQ(a.logits_rows, b.logits_rows);
  EXPECT_EQ(a.block_table, b.block_table);
  EXPECT_EQ(a.prev_sample_rows, b.prev_sample_rows);
  EXPECT_GT(b.bytes.size(), a.bytes.size());
}

// Async scheduling: the rows feeding tokens from the previous sampling call are always T entries (-1 for a
// known token) at an offset fixed by the counts, so plans with and without fed tokens share a graph.
TEST(StepPlanTest, PreviousSampleRowsAlwaysHoldOneEntryPerToken) {
  BatchPlan plan = decode_plan({1, 3, 2});
  const cuda::PackedPlan none = cuda::pack_plan(plan);
  EXPECT_EQ(read<int32_t>(none, none.prev_sample_rows, 3), (std::vector<int32_t>{-1, -1, -1}));
  plan.prev_sample_rows = {2, -1, 0};
  const cuda::PackedPlan fed = cuda::pack_plan(plan);
  EXPECT_EQ(read<int32_t>(fed, fed.prev_sample_rows, 3), plan.prev_sample_rows);
  EXPECT_EQ(fed.prev_sample_rows, none.prev_sample_rows);
  EXPECT_EQ(fed.block_table, none.block_table);
  EXPECT_EQ(fed.prev_sample_rows % 256, 0u);
  EXPECT_TRUE(plan.feeds_sampled_tokens());
  plan.validate(64);
}

// A mixed step: sequences of `lens` query tokens after `cached` cached positions each.
BatchPlan mixed_plan(const std::vector<int32_t>& lens, int32_t cached) {
  BatchPlan p;
  p.block_size = 16;
  p.cu_seqlens = {0};
  p.block_table_indptr = {0};
  int32_t next_block = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int32_t context = cached + lens[s];
    for (int32_t pos = cached; pos < context; ++pos) {
      p.token_ids.push_back(1);
      p.positions.push_back(pos);
      p.slot_mapping.push_back(pos);  // not read here
    }
    p.cu_seqlens.push_back(static_cast<int32_t>(p.token_ids.size()));
    p.context_lens.push_back(context);
    for (int32_t b = 0; b < (context + 15) / 16; ++b) p.block_table.push_back(next_block++);
    p.block_table_indptr.push_back(static_cast<int32_t>(p.block_table.size()));
    p.logits_rows.push_back(p.cu_seqlens.back() - 1);
    p.seq_ids.push_back(static_cast<int64_t>(s));
  }
  return p;
}

TEST(StepPlanTest, MlaSplitSendsLongSequencesToBlocksOfOneSequence) {
  // Sequences of 1, 70, 1, 3 and 66 query tokens; min_query 64: 70 and 66 in blocks of 4 (the last one cut
  // at the sequence's end), the rest as rows in token order.
  const BatchPlan plan = mixed_plan({1, 70, 1, 3, 66}, 10);
  const cuda::MlaStepSplit split = cuda::mla_split_step(plan.cu_seqlens, plan.positions, 64);
  EXPECT_EQ(split.rows, (std::vector<int32_t>{0, 71, 72, 73, 74}));
  const int32_t per = cuda::kMlaPrefillTokens;
  std::vector<int32_t> expected;
  for (int32_t t = 1; t < 71; t += per) expected.push_back(t);
  for (int32_t t = 75; t < 141; t += per) expected.push_back(t);
  std::vector<int32_t> got = split.blocks;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
  // Longest context first: the blocks' last positions never rise along the list.
  auto last_pos = [&](int32_t t0) {
    int32_t s = 0;
    while (plan.cu_seqlens[s + 1] <= t0) ++s;
    return plan.positions[std::min(plan.cu_seqlens[s + 1], t0 + per) - 1];
  };
  for (size_t i = 1; i < split.blocks.size(); ++i)
    EXPECT_GE(last_pos(split.blocks[i - 1]), last_pos(split.blocks[i])) << i;
  // Every token exactly once.
  std::vector<int> seen(static_cast<size_t>(plan.num_tokens()), 0);
  for (int32_t t : split.rows) ++seen[t];
  for (int32_t t0 : split.blocks) {
    int32_t s = 0;
    while (plan.cu_seqlens[s + 1] <= t0) ++s;
    for (int32_t t = t0; t < std::min(plan.cu_seqlens[s + 1], t0 + per); ++t) ++seen[t];
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  // min_query 1: every token in a block, no rows; nothing qualifies: no split at all.
  const cuda::MlaStepSplit all = cuda::mla_split_step(plan.cu_seqlens, plan.positions, 1);
  EXPECT_TRUE(all.rows.empty());
  EXPECT_EQ(all.blocks.size(), 1u + 18u + 1u + 1u + 17u);
  const cuda::MlaStepSplit none = cuda::mla_split_step(plan.cu_seqlens, plan.positions, 100);
  EXPECT_TRUE(none.rows.empty() && none.blocks.empty());
}

TEST(StepPlanTest, OnlyMultiQueryStepsPackTheMlaSplit) {
  const cuda::PackedPlan decode = cuda::pack_plan(decode_plan({1, 3, 2}));
  EXPECT_EQ(decode.num_mla_blocks, 0);
  EXPECT_EQ(decode.num_mla_rows, 0);
  EXPECT_EQ(decode.bytes.size(), decode.block_table + 6 * sizeof(int32_t));  // the block table is last
  const BatchPlan plan = mixed_plan({1, 200, 1}, 5);
  const cuda::PackedPlan mixed = cuda::pack_plan(plan);
  const cuda::MlaStepSplit split =
      cuda::mla_split_step(plan.cu_seqlens, plan.positions, cuda::mla_prefill_min_query());
  ASSERT_FALSE(split.blocks.empty());
  EXPECT_EQ(mixed.num_mla_rows, static_cast<int32_t>(split.rows.size()));
  EXPECT_EQ(mixed.num_mla_blocks, static_cast<int32_t>(split.blocks.size()));
  EXPECT_GT(mixed.mla_rows, mixed.block_table);
  EXPECT_EQ(read<int32_t>(mixed, mixed.mla_rows, split.rows.size()), split.rows);
  EXPECT_EQ(read<int32_t>(mixed, mixed.mla_blocks, split.blocks.size()), split.blocks);
}

#else

TEST(StepPlanTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
