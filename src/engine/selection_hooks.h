// The two IndexSelectionHooks of teacher-forced comparisons of sparse-attention models: SelectionRecorder
// keeps host copies of a tested model's indexer selections, SelectionForcer replays them on the CPU reference
// and counts the rows where the reference's own selection differs (as sets of kept rows: the order within a
// selection does not change attention), judging each such row by the reference's own scores
// (engine/selection_margin.h). Together with the routing replay (routing_hooks.h) the reference
// then computes what the tested model computed, so the logits' distance measures the kernels alone.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/routing_hooks.h"
#include "engine/selection_margin.h"
#include "model/index_selection_hook.h"

namespace dsinfer {

class Model;

// Installs `hook` on `model` for the scope's duration; `what` names the caller in the error a model without
// an indexer gives.
class ScopedSelectionHook {
 public:
  ScopedSelectionHook(Model& model, IndexSelectionHook* hook, const char* what);
  ~ScopedSelectionHook();
  ScopedSelectionHook(const ScopedSelectionHook&) = delete;
  ScopedSelectionHook& operator=(const ScopedSelectionHook&) = delete;

 private:
  Model& model_;
};

// Host copies ([T, K] I32) of every selection of a run, in call order.
class SelectionRecorder : public IndexSelectionHook {
 public:
  void on_select(Backend& backend, int64_t layer, Tensor& selected) override;
  std::vector<Tensor> calls;    // [T, K] I32 each
  std::vector<int64_t> layers;  // the model layer of each call
};

// Replaces each selection with the recorded one, in call order, counting where the reference's differs and
// judging each differing row. Tokens are numbered across the run's forward passes (RunTokenNumbering).
class SelectionForcer : public IndexSelectionHook {
 public:
  explicit SelectionForcer(const std::vector<Tensor>& calls) : calls_(calls) {}

  void on_index_inputs(Backend& backend, int64_t layer, const IndexScoreInputs& inputs) override;
  void on_select(Backend& backend, int64_t layer, Tensor& selected) override;

  bool all_used() const { return next_ == calls_.size(); }
  int64_t rows = 0, rows_differ = 0;        // token rows compared; rows whose kept sets differ
  int64_t entries = 0, entries_differ = 0;  // rows the tested model kept; those the reference did not keep
  std::vector<SelectionFlip> flips;         // one per differing row, in call order

 private:
  const std::vector<Tensor>& calls_;
  size_t next_ = 0;
  IndexScoreInputs inputs_;  // the current layer's (from on_index_inputs)
  int64_t input_layer_ = -1;
  RunTokenNumbering tokens_;
};

}  // namespace dsinfer
