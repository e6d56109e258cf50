// The default Backend::sample: HostSampler over a host copy of the logits, row by row; the default
// sample_async / sample_wait / feed_sampled_tokens (async scheduling) on top of it, ids kept on the host.
#include <algorithm>

#include "backend/backend.h"
#include "backend/host_sampling.h"
#include "core/error.h"

namespace dsinfer {

std::vector<SampledToken> Backend::sample(const Tensor& logits, const std::vector<SamplingRow>& rows) {
  DSI_CHECK(logits.ndim() == 2 && logits.dim(0) == static_cast<int64_t>(rows.size()), "sample: logits ",
            shape_str(logits.shape()), " for ", rows.size(), " rows");
  const Tensor host = to_host(logits);  // [rows, vocab]
  DSI_CHECK(host.dtype() == DType::F32, "sample: logits must be float32");
  const int32_t V = static_cast<int32_t>(host.dim(1));
  HostSampler sampler;
  std::vector<SampledToken> out;
  out.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    out.push_back(sampler.sample_row(host.f32() + static_cast<int64_t>(r) * V, V, rows[r]));
  }
  return out;
}

void Backend::sample_async(const Tensor& logits, const std::vector<SamplingRow>& rows) {
  DSI_CHECK(!async_pending_, "sample_async: the previous call's results were not taken (sample_wait)");
  last_sampled_.clear();
  // The host pipeline, not the virtual sample(): a backend's sample() may itself be sample_async +
  // sample_wait (CUDA), which hands host logits back here.
  async_results_ = Backend::sample(logits, rows);
  for (const SampledToken& t : async_results_) last_sampled_.push_back(t.error.empty() ? t.token : -1);
  async_pending_ = true;
}

std::vector<SampledToken> Backend::sample_wait() {
  DSI_CHECK(async_pending_, "sample_wait: no sample_async call is pending");
  async_pending_ = false;
  return std::move(async_results_);
}

void Backend::feed_sampled_tokens(BatchPlan& plan) {
  for (size_t t = 0; t < plan.prev_sample_rows.size(); ++t) {
    const int32_t r = plan.prev_sample_rows[t];
    if (r < 0) continue;
    DSI_CHECK(r < static_cast<int32_t>(last_sampled_.size()), "feed_sampled_tokens: row ", r,
              " of a sample call of ", last_sampled_.size(), " rows");
    plan.token_ids[t] = std::max(0, last_sampled_[r]);  // a failed row's request ends; its row is dropped
  }
}

}  // namespace dsinfer
