// RoutingRecorder and RoutingForcer (see routing_hooks.h).
#include "engine/routing_hooks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/model.h"

namespace dsinfer {

ScopedRoutingHook::ScopedRoutingHook(Model& model, MoeRoutingHook* hook, const char* what) : model_(model) {
  DSI_CHECK(model.set_moe_routing_hook(hook), what, ": the model has no MoE routing");
}

ScopedRoutingHook::~ScopedRoutingHook() {
  model_.set_moe_routing_hook(nullptr);
}

std::string format_numbers(const char* format, double a, double b) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, a, b);
  return buf;
}

Tensor host_ids(const Tensor& host, int64_t layer, const char* what) {
  if (host.dtype() == DType::I32) return host;
  DSI_CHECK(host.dtype() == DType::F32, what, " of layer ", layer, " came back as ",
            dtype_name(host.dtype()));
  Tensor ids = Tensor::empty(DType::I32, host.shape());  // [T, k]
  const float* src = host.data<float>();
  int32_t* dst = ids.data<int32_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    dst[i] = static_cast<int32_t>(src[i]);
    DSI_CHECK(static_cast<float>(dst[i]) == src[i], what, " of layer ", layer, ": ", src[i],
              " is not a whole number");
  }
  return ids;
}

void RoutingRecorder::on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) {
  calls.push_back({host_ids(backend.to_host(ids), layer), backend.to_host(weights)});
}

void RoutingForcer::on_router_input(Backend& backend, int64_t layer, const Tensor& x, const Tensor& router,
                                    const Tensor& bias, const RoutingParams& params) {
  x_ = x;  // shares storage; read in on_route, while the model still holds them
  router_ = router;
  bias_ = bias;
  params_ = params;
  input_layer_ = layer;
}

void RoutingForcer::on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) {
  DSI_CHECK(ids.is_cpu() && weights.is_cpu(), "routing check: the reference must run on the CPU backend");
  DSI_CHECK(next_ < calls_.size(), "routing check: the reference routed more often than the tested model");
  const auto& [fids, fweights] = calls_[next_++];
  DSI_CHECK(ids.dtype() == DType::I32 && fids.dtype() == DType::I32, "routing check: expert ids must be I32");
  DSI_CHECK(fids.shape() == ids.shape() && fweights.shape() == weights.shape(),
            "routing check: routing of layer ", layer, " has shape ", shape_str(ids.shape()),
            " on the reference and ", shape_str(fids.shape()), " on the tested model");
  const int64_t T = ids.dim(0), k = ids.dim(1);
  const int64_t first = tokens_.first_token(layer, T);
  const bool have_inputs = input_layer_ == layer && x_ && x_.dim(0) == T;
  std::vector<float> logits;  // [T, E], computed at the first flip of the call
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* own_row = ids.data<int32_t>() + t * k;
    const int32_t* forced_row = fids.data<int32_t>() + t * k;
    std::vector<int32_t> own(own_row, own_row + k), forced(forced_row, forced_row + k);
    std::sort(own.begin(), own.end());
    std::sort(forced.begin(), forced.end());
    ++decisions;
    if (own == forced) continue;
    ++flipped;
    RoutingFlip f;
    if (have_inputs) {
      if (logits.empty()) logits = router_logits(x_, router_);
      const int64_t E = router_.dim(0), H = x_.dim(1);
      const RoutingScores s =
          routing_scores(logits.data() + t * E, x_.f32() + t * H, router_, bias_, params_);
      f = judge_routing_flip(s, own_row, forced_row, k);
    } else {
      f.level = "unknown";  // the model handed no router inputs: the flip cannot be judged
      f.margin = INFINITY;
    }
    f.token = first + t;
    f.layer = layer;
    flips.push_back(std::move(f));
  }
  input_layer_ = -1;
  x_ = router_ = bias_ = Tensor();
  ids = fids.clone();
  weights = fweights.clone();
}

}  // namespace dsinfer
