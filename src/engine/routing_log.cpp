// SequenceRoutingLog and RoutingComparer (see routing_log.h).
#include "engine/routing_log.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "engine/routing_hooks.h"

namespace dsinfer {

void SequenceRoutingLog::on_step(const BatchPlan& plan) {
  if (inner_) inner_->on_step(plan);
  row_seq_.assign(plan.positions.size(), -1);
  row_pos_.assign(plan.positions.begin(), plan.positions.end());
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    const int64_t id = s < static_cast<int32_t>(plan.seq_ids.size()) ? plan.seq_ids[s] : -1;
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) row_seq_[t] = id;
  }
}

void SequenceRoutingLog::on_router_input(Backend& backend, int64_t layer, const Tensor& x,
                                         const Tensor& router, const Tensor& bias,
                                         const RoutingParams& params) {
  if (inner_) inner_->on_router_input(backend, layer, x, router, bias, params);
}

void SequenceRoutingLog::on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) {
  if (inner_) inner_->on_route(backend, layer, ids, weights);
  const Tensor hids = host_ids(backend.to_host(ids), layer);  // [T, k]
  const Tensor hw = backend.to_host(weights);                 // [T, k]
  const int64_t T = hids.dim(0), k = hids.dim(1);
  DSI_CHECK(T == static_cast<int64_t>(row_seq_.size()), "batch agreement: layer ", layer, " routed ", T,
            " rows in a pass of ", row_seq_.size(), " tokens (no on_step before it?)");
  layers_[layer] = true;
  for (int64_t t = 0; t < T; ++t) {
    if (row_seq_[t] < 0) continue;  // the engine's memory-profiling pass
    RoutingDecision& d = log_[{row_seq_[t], row_pos_[t]}][layer];
    d.ids.assign(hids.data<int32_t>() + t * k, hids.data<int32_t>() + (t + 1) * k);
    d.weights.assign(hw.f32() + t * k, hw.f32() + (t + 1) * k);
  }
}

const RoutingDecision* SequenceRoutingLog::find(int64_t seq, int64_t position, int64_t layer) const {
  auto it = log_.find({seq, position});
  if (it == log_.end()) return nullptr;
  auto d = it->second.find(layer);
  return d == it->second.end() ? nullptr : &d->second;
}

std::vector<int64_t> SequenceRoutingLog::layers() const {
  std::vector<int64_t> out;
  for (const auto& [layer, seen] : layers_) out.push_back(layer);
  return out;
}

std::vector<std::pair<Tensor, Tensor>> SequenceRoutingLog::forced_calls(
    int64_t seq, const std::vector<std::pair<int64_t, int64_t>>& passes) const {
  std::vector<std::pair<Tensor, Tensor>> calls;
  for (const auto& [begin, end] : passes) {
    for (int64_t layer : layers()) {
      const RoutingDecision* first = find(seq, begin, layer);
      DSI_CHECK(first, "batch agreement: no batched routing recorded for sequence ", seq, " position ", begin,
                " layer ", layer);
      const int64_t k = static_cast<int64_t>(first->ids.size());
      Tensor ids = Tensor::empty(DType::I32, {end - begin, k});  // [rows, k]
      Tensor w = Tensor::empty(DType::F32, {end - begin, k});    // [rows, k]
      for (int64_t p = begin; p < end; ++p) {
        const RoutingDecision* d = find(seq, p, layer);
        DSI_CHECK(d && static_cast<int64_t>(d->ids.size()) == k, "batch agreement: no batched routing ",
                  "recorded for sequence ", seq, " position ", p, " layer ", layer);
        std::memcpy(ids.data<int32_t>() + (p - begin) * k, d->ids.data(), k * sizeof(int32_t));
        std::memcpy(w.f32() + (p - begin) * k, d->weights.data(), k * sizeof(float));
      }
      calls.push_back({ids, w});
    }
  }
  return calls;
}

void RoutingComparer::on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                                      const Tensor& bias, const RoutingParams& params) {
  x_ = x;  // shares storage; read in on_route, while the model still holds them
  router_ = router;
  bias_ = bias;
  params_ = params;
}

void RoutingComparer::on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) {
  const Tensor own = host_ids(backend.to_host(ids), layer);  // [T, k]
  const int64_t T = own.dim(0), k = own.dim(1);
  DSI_CHECK(T == static_cast<int64_t>(positions_.size()), "batch agreement: layer ", layer, " routed ", T,
            " rows in a pass of ", positions_.size(), " tokens");
  Tensor x, router, bias;     // host float32 copies, fetched at the call's first flip
  std::vector<float> logits;  // [T, E]
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = positions_[t];
    if (pos > last_) continue;
    const RoutingDecision* d = log_.find(seq_, pos, layer);
    if (!d) {
      ++missing;
      continue;
    }
    ++decisions;
    const int32_t* own_row = own.data<int32_t>() + t * k;
    std::vector<int32_t> a(own_row, own_row + k), b = d->ids;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a == b) continue;
    DSI_CHECK(static_cast<int64_t>(d->ids.size()) == k, "batch agreement: top-k differs between the runs");
    if (logits.empty()) {
      DSI_CHECK(x_ && router_, "batch agreement: the model gave no router input for layer ", layer);
      x = backend.to_host(x_);
      router = backend.to_host(router_);
      bias = bias_ ? backend.to_host(bias_) : Tensor();
      logits = router_logits(x, router);
    }
    const int64_t E = router.dim(0), H = x.dim(1);
    const RoutingScores s = routing_scores(logits.data() + t * E, x.f32() + t * H, router, bias, params_);
    RoutingFlip f = judge_routing_flip(s, own_row, d->ids.data(), k);
    f.token = pos;
    f.layer = layer;
    flips.push_back(std::move(f));
  }
  x_ = router_ = bias_ = Tensor();
}

}  // namespace dsinfer
