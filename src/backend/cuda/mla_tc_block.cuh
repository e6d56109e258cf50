// The work of one block of the tensor-core MLA decode kernels (mla_tc_kernels.cu, mla_tc_v2_kernels.cu): its
// (token, head group) from blockIdx.x, its context split from blockIdx.y, and the positions and block table
// of that split. One definition, so both designs split the work alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mla_kernels.h"

namespace dsinfer::cuda::detail {

struct MlaTcBlock {
  int64_t tl;             // launch token: partial states and arrival counters
  int64_t t;              // query token: q, out, position, sequence
  int h0, hg;             // first head of the group, heads in it (<= heads)
  int split;              // context split
  int begin, end;         // positions [begin, end) of the split (32 bits: plan.positions is int32); sparse:
                          // entries of the token's list
  const int32_t* blocks;  // the sequence's block table
  int bs;                 // cache block size
};

// Head groups of one (token, split) are adjacent block indices, so they run together and share L2.
__device__ __forceinline__ MlaTcBlock mla_tc_block(const MlaPlanView& plan, int H, int heads, int64_t chunk) {
  MlaTcBlock b;
  const int groups = (H + heads - 1) / heads;
  b.tl = blockIdx.x / groups;
  b.t = plan.rows ? plan.rows[b.tl] : b.tl;
  b.h0 = static_cast<int>(blockIdx.x % groups) * heads;
  b.hg = min(heads, H - b.h0);
  b.split = blockIdx.y;
  // Dense: positions [0, positions[t]]; sparse: entries [0, selected_k) of the token's list.
  const int n = plan.selected ? static_cast<int>(plan.selected_k) : plan.positions[b.t] + 1;
  b.begin = static_cast<int>(min(static_cast<int64_t>(b.split) * chunk, static_cast<int64_t>(n)));
  b.end = static_cast<int>(min(static_cast<int64_t>(n), b.begin + chunk));
  b.blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[b.t]];
  b.bs = static_cast<int>(plan.block_size);
  return b;
}

}  // namespace dsinfer::cuda::detail
