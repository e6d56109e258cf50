// The MLA split of a step by sequence (host side): which tokens the multi-query kernel takes, in which
// blocks and order, and which the split decode kernel takes; and the knobs of that choice
// (DSINFER_MLA_PREFILL_MIN_QUERY, DSINFER_MLA_PREFILL_MIN_BLOCKS).
#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "backend/cuda/mla_kernels.h"
#include "core/env_choice.h"

namespace dsinfer::cuda {

namespace {

// From DISABLED_BenchMlaPrefill on the H200 (2026-12-01, whole steps on one kernel): the multi-query kernel
// won with 2048 blocks (1.33x) and lost with 128 (0.82x) and 32 (0.37x), where its few long blocks leave
// SMs idle while the decode kernel splits contexts over every SM. Chunks below 64 tokens are few blocks
// each streaming a whole context; they stay on the decode kernel.
constexpr int kDefaultPrefillMinQuery = 64;
constexpr int kDefaultPrefillMinBlocks = 264;  // two waves of the H200's 132 SMs

int& prefill_min_query() {
  static int min_query = env_int("DSINFER_MLA_PREFILL_MIN_QUERY", kDefaultPrefillMinQuery, 1);
  return min_query;
}

int& prefill_min_blocks() {
  static int min_blocks = env_int("DSINFER_MLA_PREFILL_MIN_BLOCKS", kDefaultPrefillMinBlocks);
  return min_blocks;
}

}  // namespace

MlaStepSplit mla_split_step(const std::vector<int32_t>& cu_seqlens, const std::vector<int32_t>& positions,
                            int32_t min_query) {
  MlaStepSplit split;
  const int32_t S = static_cast<int32_t>(cu_seqlens.size()) - 1;
  bool any = false;
  for (int32_t s = 0; s < S && !any; ++s) any = cu_seqlens[s + 1] - cu_seqlens[s] >= min_query;
  if (!any) return split;
  std::vector<int32_t> last_pos;  // [blocks] position of each block's last token: its context
  for (int32_t s = 0; s < S; ++s) {
    const int32_t begin = cu_seqlens[s], end = cu_seqlens[s + 1];
    if (end - begin >= min_query) {
      for (int32_t t = begin; t < end; t += kMlaPrefillTokens) {
        split.blocks.push_back(t);
        last_pos.push_back(positions[std::min(end, t + kMlaPrefillTokens) - 1]);
      }
    } else {
      for (int32_t t = begin; t < end; ++t) split.rows.push_back(t);
    }
  }
  // Longest context first (ties in token order): the GPU starts the blocks in index order, so the long
  // ones run in the first waves and the short ones fill the tail. A block's result does not depend on it.
  std::vector<int32_t> order(split.blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return last_pos[a] > last_pos[b]; });
  std::vector<int32_t> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) sorted[i] = split.blocks[order[i]];
  split.blocks = std::move(sorted);
  return split;
}

bool mla_prefill_chosen(int64_t num_blocks, int64_t H) {
  if (num_blocks == 0) return false;
  return num_blocks * ((H + 15) / 16) >= prefill_min_blocks();
}

int mla_prefill_min_query() {
  return prefill_min_query();
}

int mla_prefill_min_blocks() {
  return prefill_min_blocks();
}

void mla_set_prefill_min_query(int min_query) {
  prefill_min_query() = std::max(1, min_query);
}

void mla_set_prefill_min_blocks(int min_blocks) {
  prefill_min_blocks() = std::max(0, min_blocks);
}

}  // namespace dsinfer::cuda
