// IndexSelectionHook: sees, and may replace, the rows a sparse-attention model's indexer keeps in each layer
// of a forward pass (DeepSeek-V3.2's lightning indexer, DeepSeek-V4's CSA indexer). The evaluation tools'
// teacher-forced comparison records a GPU run's selections and replays them on the CPU reference, so a
// kernel error is told apart from a selection that differs where two keys' scores are within rounding.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/batch_plan.h"
#include "kv/kv_cache.h"

namespace dsinfer {

// What an indexer ranks, as its backend holds it: token t's score of key row j is
//   c(t, j) = sum_h (weights[t, h] * weight_scale) * relu(scale * q[t, h] . K[j])
// over the key rows j < (positions[t] + 1) / ratio of t's sequence in cache entry `entry` (V3.2: ratio 1,
// the cached positions; V4: the compressed rows). Valid until the layer's on_select returns.
struct IndexScoreInputs {
  Tensor q;        // [T, h, d]
  Tensor weights;  // [T, h]
  const KvCache* cache = nullptr;
  int64_t entry = -1;
  const BatchPlan* plan = nullptr;
  int64_t ratio = 1;
  float scale = 1.0f, weight_scale = 1.0f;
};

class IndexSelectionHook {
 public:
  virtual ~IndexSelectionHook() = default;
  // Called once per indexed layer and forward pass, in layer order, after the selection: selected [T, K] I32
  // (V3.2: cache positions; V4: compressed rows; -1 = unused) as `backend` returned it. The hook may replace
  // it (same shape, a tensor `backend` takes).
  virtual void on_select(Backend& backend, int64_t layer, Tensor& selected) = 0;
  // Called just before the same layer's selection with the scores' inputs. Default: nothing (the routing
  // rule judges a differing selection by the CPU reference's own scores here).
  virtual void on_index_inputs(Backend& backend, int64_t layer, const IndexScoreInputs& inputs) {}
};

}  // namespace dsinfer
