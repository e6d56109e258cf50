// run_routing_check: record the tested model's routing, replay it on the reference (see routing_check.h).
#include "engine/routing_check.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "engine/golden_eval.h"
#include "engine/sequence_runner.h"

namespace dsinfer {
namespace {

// Backend::to_host hands back values as F32 (the GPU's I32 expert ids too): the ids as I32 again, each
// checked to be a whole number.
Tensor host_ids(const Tensor& host, int64_t layer) {
  if (host.dtype() == DType::I32) return host;
  DSI_CHECK(host.dtype() == DType::F32, "routing check: expert ids of layer ", layer, " came back as ",
            dtype_name(host.dtype()));
  Tensor ids = Tensor::empty(DType::I32, host.shape());  // [T, k]
  const float* src = host.data<float>();
  int32_t* dst = ids.data<int32_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    dst[i] = static_cast<int32_t>(src[i]);
    DSI_CHECK(static_cast<float>(dst[i]) == src[i], "routing check: expert id ", src[i], " of layer ", layer,
              " is not a whole number");
  }
  return ids;
}

// Host copies of every routing call of a run, in call order.
class RoutingRecorder : public MoeRoutingHook {
 public:
  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override {
    calls.push_back({host_ids(backend.to_host(ids), layer), backend.to_host(weights)});
  }
  std::vector<std::pair<Tensor, Tensor>> calls;  // ([T, k] I32, [T, k] F32)
};

// Replaces each routing call's result with the recorded one and counts the decisions that differ.
class RoutingForcer : public MoeRoutingHook {
 public:
  explicit RoutingForcer(const std::vector<std::pair<Tensor, Tensor>>& calls) : calls_(calls) {}

  void on_route(Backend& backend, int64_t layer, Tensor& ids, Tensor& weights) override {
    DSI_CHECK(ids.is_cpu() && weights.is_cpu(), "routing check: the reference must run on the CPU backend");
    DSI_CHECK(next_ < calls_.size(), "routing check: the reference routed more often than the tested model");
    const auto& [fids, fweights] = calls_[next_++];
    DSI_CHECK(ids.dtype() == DType::I32 && fids.dtype() == DType::I32,
              "routing check: expert ids must be I32");
    DSI_CHECK(fids.shape() == ids.shape() && fweights.shape() == weights.shape(),
              "routing check: routing of layer ", layer, " has shape ", shape_str(ids.shape()),
              " on the reference and ", shape_str(fids.shape()), " on the tested model");
    const int64_t T = ids.dim(0), k = ids.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> own(ids.data<int32_t>() + t * k, ids.data<int32_t>() + (t + 1) * k);
      std::vector<int32_t> forced(fids.data<int32_t>() + t * k, fids.data<int32_t>() + (t + 1) * k);
      std::sort(own.begin(), own.end());
      std::sort(forced.begin(), forced.end());
      flipped += own != forced;
      ++decisions;
    }
    ids = fids.clone();
    weights = fweights.clone();
  }

  bool all_used() const { return next_ == calls_.size(); }
  int64_t decisions = 0, flipped = 0;

 private:
  const std::vector<std::pair<Tensor, Tensor>>& calls_;
  size_t next_ = 0;
};

double rel_l2(const Tensor& a, const Tensor& ref) {
  DSI_CHECK(a.shape() == ref.shape(), "routing check: logits of shapes ", shape_str(a.shape()), " and ",
            shape_str(ref.shape()));
  return rel_l2_error(a.f32(), ref.f32(), a.numel());
}

// All prompt rows' logits [tokens, vocab] of one run, with `hook` in place for its duration.
Tensor prompt_logits(Model& model, MoeRoutingHook* hook, const std::vector<int32_t>& prompt, int64_t chunk) {
  DSI_CHECK(model.set_moe_routing_hook(hook), "routing check: the model has no MoE routing to check");
  struct Unhook {
    Model& m;
    ~Unhook() { m.set_moe_routing_hook(nullptr); }
  } unhook{model};
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()) + 1);
  return runner.append(prompt, /*all_logits=*/true, chunk);
}

}  // namespace

std::vector<RoutingCheckCase> run_routing_check(Model& tested, Model& reference,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t prefill_chunk) {
  std::vector<RoutingCheckCase> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RoutingRecorder recorder;
    const Tensor tested_logits = prompt_logits(tested, &recorder, prompts[i], prefill_chunk);  // [n, V]
    const Tensor free_logits = prompt_logits(reference, nullptr, prompts[i], prefill_chunk);   // [n, V]
    RoutingForcer forcer(recorder.calls);
    const Tensor forced_logits = prompt_logits(reference, &forcer, prompts[i], prefill_chunk);  // [n, V]
    DSI_CHECK(forcer.all_used(), "routing check: the tested model routed more often than the reference");
    RoutingCheckCase c;
    c.index = static_cast<int>(i);
    c.tokens = static_cast<int64_t>(prompts[i].size());
    c.decisions = forcer.decisions;
    c.flipped = forcer.flipped;
    c.free_rel_l2 = rel_l2(tested_logits, free_logits);
    c.forced_rel_l2 = rel_l2(tested_logits, forced_logits);
    out.push_back(c);
  }
  return out;
}

nlohmann::json routing_check_json(const std::vector<RoutingCheckCase>& cases) {
  nlohmann::json j = nlohmann::json::array();
  for (const RoutingCheckCase& c : cases) {
    j.push_back({{"case", c.index},
                 {"tokens", c.tokens},
                 {"decisions", c.decisions},
                 {"flipped", c.flipped},
                 {"free_rel_l2", c.free_rel_l2},
                 {"forced_rel_l2", c.forced_rel_l2}});
  }
  return j;
}

}  // namespace dsinfer
