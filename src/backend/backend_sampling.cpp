// The default Backend::sample: HostSampler over a host copy of the logits, row by row.
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

}  // namespace dsinfer
