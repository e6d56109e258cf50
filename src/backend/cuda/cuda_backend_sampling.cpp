// CudaBackend::sample: packs each row's parameters and penalty token lists into flat device arrays, runs
// the sampling kernel over the device logits and copies back only the per-row results (one copy per step).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sampling_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

namespace {

// Appends `ids` to `flat`, or reports the first id outside [0, vocab).
bool append_ids(std::vector<int32_t>& flat, std::span<const int32_t> ids, int64_t vocab, std::string* error) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      *error = str_cat("sampler: token id ", id, " is outside the vocabulary of ", vocab);
      return false;
    }
  }
  flat.insert(flat.end(), ids.begin(), ids.end());
  return true;
}

}  // namespace

std::vector<SampledToken> CudaBackend::sample(const Tensor& logits, const std::vector<SamplingRow>& rows) {
  if (logits.is_cpu()) return Backend::sample(logits, rows);
  DSI_CHECK(logits.ndim() == 2 && logits.dim(0) == static_cast<int64_t>(rows.size()), "sample: logits ",
            shape_str(logits.shape()), " for ", rows.size(), " rows");
  DSI_CHECK(logits.device() == Device::kCuda && logits.dtype() == DType::F32,
            "sample: logits must be float32 on the GPU, got ", dtype_name(logits.dtype()));
  const int64_t R = logits.dim(0), V = logits.dim(1);
  if (R == 0) return {};

  std::vector<cuda::SampleRowParams> params(R);
  std::vector<int32_t> seen, gen_ids, gen_counts;
  std::vector<std::string> errors(R);
  int32_t work_rows = 0;
  for (int64_t r = 0; r < R; ++r) {
    const SamplingRow& row = rows[r];
    cuda::SampleRowParams& p = params[r];
    std::memset(&p, 0, sizeof(p));
    p.temperature = row.temperature;
    p.top_p = row.top_p;
    p.min_p = row.min_p;
    p.repetition_penalty = row.repetition_penalty;
    p.presence_penalty = row.presence_penalty;
    p.frequency_penalty = row.frequency_penalty;
    p.top_k = row.top_k;
    p.logprobs = std::clamp(row.logprobs, 0, cuda::kSampleMaxTopLogprobs);
    p.seed = row.seed;
    p.draw_index = row.draw_index;
    p.work_row = -1;
    if (row.logprobs > cuda::kSampleMaxTopLogprobs) {
      errors[r] =
          str_cat("sampler: at most ", cuda::kSampleMaxTopLogprobs, " top logprobs, got ", row.logprobs);
    }
    if (!row.has_penalties() || !errors[r].empty()) continue;
    p.seen_begin = static_cast<int32_t>(seen.size());
    if (row.repetition_penalty != 1.0f && !append_ids(seen, row.seen_tokens, V, &errors[r])) continue;
    p.seen_end = static_cast<int32_t>(seen.size());
    p.gen_begin = static_cast<int32_t>(gen_ids.size());
    if (row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f) {
      DSI_CHECK(row.generated_tokens.size() == row.generated_counts.size(),
                "sample: ", row.generated_tokens.size(), " generated tokens but ",
                row.generated_counts.size(), " counts");
      if (!append_ids(gen_ids, row.generated_tokens, V, &errors[r])) continue;
      gen_counts.insert(gen_counts.end(), row.generated_counts.begin(), row.generated_counts.end());
    }
    p.gen_end = static_cast<int32_t>(gen_ids.size());
    p.work_row = work_rows++;
  }

  const int64_t capacity = cuda::sample_candidate_capacity(V);
  Tensor work;  // [rows with penalties, V]: the penalised logits
  if (work_rows > 0) work = Tensor::empty_on(Device::kCuda, DType::F32, {work_rows, V});
  Tensor cand_ids = Tensor::empty_on(Device::kCuda, DType::I32, {R, capacity});     // [R, capacity]
  Tensor cand_values = Tensor::empty_on(Device::kCuda, DType::F32, {R, capacity});  // [R, capacity]
  const int64_t result_bytes = R * static_cast<int64_t>(sizeof(cuda::SampleRowResult));
  Tensor results = Tensor::empty_on(Device::kCuda, DType::U8, {result_bytes});
  cuda::launch_sample_rows(logits.data<float>(), R, V, sample_params_.upload(params),
                           sample_seen_.upload(seen), sample_gen_ids_.upload(gen_ids),
                           sample_gen_counts_.upload(gen_counts), work ? work.data<float>() : nullptr,
                           cand_ids.data<int32_t>(), cand_values.data<float>(),
                           static_cast<cuda::SampleRowResult*>(results.raw()));
  std::vector<cuda::SampleRowResult> host(R);
  cuda::copy_to_host(host.data(), results.raw(), static_cast<size_t>(result_bytes));  // waits for the kernel

  std::vector<SampledToken> out(R);
  for (int64_t r = 0; r < R; ++r) {
    const cuda::SampleRowResult& h = host[r];
    SampledToken& t = out[r];
    if (!errors[r].empty()) {
      t.error = errors[r];
    } else if (h.error == cuda::kSampleBadLogit) {
      t.error = "sampler: a logit is NaN or +inf";
    } else if (h.error == cuda::kSampleAllMasked) {
      t.error = "sampler: every logit is -inf";
    } else {
      DSI_CHECK(h.token >= 0 && h.token < V, "sample: the kernel returned token ", h.token, " for row ", r);
      t.token = h.token;
      if (rows[r].logprobs > 0) {
        t.logprob = h.logprob;
        for (int32_t i = 0; i < h.num_top; ++i) t.top.emplace_back(h.top_ids[i], h.top_logprobs[i]);
      }
    }
  }
  return out;
}

}  // namespace dsinfer
