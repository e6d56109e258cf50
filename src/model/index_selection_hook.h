// IndexSelectionHook: sees, and may replace, the rows a sparse-attention model's indexer keeps in each layer
// of a forward pass (DeepSeek-V3.2's lightning indexer, DeepSeek-V4's CSA indexer). The evaluation tools'
// teacher-forced comparison records a GPU run's selections and replays them on the CPU reference, so a
// kernel error is told apart from a selection that differs where two keys' scores are within rounding.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace dsinfer {

class IndexSelectionHook {
 public:
  virtual ~IndexSelectionHook() = default;
  // Called once per indexed layer and forward pass, in layer order, after the selection: selected [T, K] I32
  // (V3.2: cache positions; V4: compressed rows; -1 = unused) as `backend` returned it. The hook may replace
  // it (same shape, a tensor `backend` takes).
  virtual void on_select(Backend& backend, int64_t layer, Tensor& selected) = 0;
};

}  // namespace dsinfer
