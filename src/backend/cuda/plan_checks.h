// Host-side checks of a step's BatchPlan shared by CudaBackend's attention ops: the kernels index the
// sequences' block tables with the plan's positions, so a position past its sequence's blocks must be
// refused before any launch. Header-only glue of dsinfer_lib.
#pragma once
#include <cstdint>

#include "backend/batch_plan.h"
#include "core/error.h"

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

}  // namespace dsinfer::cuda
