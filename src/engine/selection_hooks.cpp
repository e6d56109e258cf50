// SelectionRecorder and SelectionForcer (see selection_hooks.h).
#include "engine/selection_hooks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/routing_hooks.h"
#include "model/model.h"

namespace dsinfer {

ScopedSelectionHook::ScopedSelectionHook(Model& model, IndexSelectionHook* hook, const char* what)
    : model_(model) {
  DSI_CHECK(model.set_index_selection_hook(hook), what, ": the model has no indexer");
}

ScopedSelectionHook::~ScopedSelectionHook() {
  model_.set_index_selection_hook(nullptr);
}

void SelectionRecorder::on_select(Backend& backend, int64_t layer, Tensor& selected) {
  calls.push_back(host_ids(backend.to_host(selected), layer, "selection check: selected rows"));  // [T, K]
  layers.push_back(layer);
}

void SelectionForcer::on_index_inputs(Backend& backend, int64_t layer, const IndexScoreInputs& inputs) {
  inputs_ = inputs;  // shares the tensors' storage; read in on_select, while the model still holds them
  input_layer_ = layer;
}

void SelectionForcer::on_select(Backend& backend, int64_t layer, Tensor& selected) {
  DSI_CHECK(selected.is_cpu() && selected.dtype() == DType::I32,
            "selection check: the reference must run on the CPU backend");
  DSI_CHECK(next_ < calls_.size(),
            "selection check: the reference selected more often than the tested model");
  const Tensor& forced = calls_[next_++];  // [T, K]
  DSI_CHECK(forced.shape() == selected.shape(), "selection check: layer ", layer, " selected ",
            shape_str(selected.shape()), " where the tested model selected ", shape_str(forced.shape()));
  const int64_t T = selected.ndim() == 2 ? selected.dim(0) : 0, K = T > 0 ? selected.dim(1) : 0;
  const int64_t first = tokens_.first_token(layer, T);
  const bool have_inputs = input_layer_ == layer && inputs_.plan && inputs_.q && inputs_.q.dim(0) == T;
  std::vector<int32_t> own, kept;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* a = selected.data<int32_t>() + t * K;
    const int32_t* b = forced.data<int32_t>() + t * K;
    own.assign(a, a + K);
    kept.assign(b, b + K);
    own.erase(std::remove(own.begin(), own.end(), -1), own.end());
    kept.erase(std::remove(kept.begin(), kept.end(), -1), kept.end());
    std::sort(own.begin(), own.end());
    std::sort(kept.begin(), kept.end());
    int64_t missing = 0;  // kept by the tested model, not by the reference
    for (int32_t r : kept) missing += !std::binary_search(own.begin(), own.end(), r);
    ++rows;
    entries += static_cast<int64_t>(kept.size());
    entries_differ += missing;
    if (own == kept) continue;
    ++rows_differ;
    SelectionFlip f;
    if (have_inputs) {
      f = judge_selection_flip(inputs_, t, own, kept);
    } else {
      f.level = "unknown";  // the model handed no score inputs: the row cannot be judged
      f.margin = INFINITY;
    }
    f.token = first + t;
    f.layer = layer;
    flips.push_back(std::move(f));
  }
  input_layer_ = -1;
  inputs_ = IndexScoreInputs();
  selected = forced.clone();
}

}  // namespace dsinfer
