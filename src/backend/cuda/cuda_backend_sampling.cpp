// CudaBackend::sample / sample_async / sample_wait: packs each row's parameters and penalty token lists
// into one pinned buffer (read by the kernels over the bus, or one asynchronous copy with host reads off),
// runs the sampling kernel over the device logits and returns only the per-row results (written into pinned
// memory by the kernel, or one asynchronous copy; waited for in sample_wait); the device results feed the
// next step's tokens (feed_sampled_tokens, launch_feed_sampled_tokens). Row parameters that repeat the last
// call's (greedy decode steps of the same requests) are read from a device copy the kernel left instead.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/host_reads.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling_kernels.h"
#include "backend/cuda/scoring_kernels.h"
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

// false (and the error) when an id repeats: the kernel adds the biases of one row in parallel.
bool distinct_ids(std::span<const int32_t> ids, std::string* error) {
  std::unordered_set<int32_t> seen;
  for (int32_t id : ids) {
    if (!seen.insert(id).second) {
      *error = str_cat("sampler: logit_bias has token ", id, " twice");
      return false;
    }
  }
  return true;
}

// Appends v at a 256-byte aligned offset of `out`; returns the offset.
template <typename T>
size_t append_aligned(std::vector<char>& out, const std::vector<T>& v) {
  const size_t offset = (out.size() + 255) / 256 * 256;
  out.resize(offset + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data() + offset, v.data(), v.size() * sizeof(T));
  return offset;
}

}  // namespace

std::vector<SampledToken> CudaBackend::sample(const Tensor& logits, const std::vector<SamplingRow>& rows) {
  sample_async(logits, rows);
  return sample_wait();
}

void CudaBackend::sample_async(const Tensor& logits, const std::vector<SamplingRow>& rows) {
  DSI_CHECK(!sample_.pending, "sample_async: the previous call's results were not taken (sample_wait)");
  if (logits.is_cpu()) {
    Backend::sample_async(logits, rows);
    sample_ = SampleCall{};
    sample_.pending = true;
    return;
  }
  DSI_CHECK(logits.ndim() == 2 && logits.dim(0) == static_cast<int64_t>(rows.size()), "sample: logits ",
            shape_str(logits.shape()), " for ", rows.size(), " rows");
  DSI_CHECK(logits.device() == Device::kCuda && logits.dtype() == DType::F32,
            "sample: logits must be float32 on the GPU, got ", dtype_name(logits.dtype()));
  const int64_t R = logits.dim(0), V = logits.dim(1);
  SampleCall call;
  call.rows = static_cast<int32_t>(R);
  call.vocab = static_cast<int32_t>(V);
  call.on_device = true;
  call.errors.resize(R);
  call.logprobs.resize(R);
  if (R == 0) {
    call.pending = true;
    sample_ = std::move(call);
    return;
  }

  std::vector<cuda::SampleRowParams> params(R);
  std::vector<int32_t> seen, gen_ids, gen_counts, bias_ids;
  std::vector<float> bias_values;
  std::vector<uint32_t> masks;  // the allowed-token bitmasks of constrained rows, (V + 31) / 32 words each
  std::vector<std::string>& errors = call.errors;
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
    // A row that draws nothing (greedy or forced) ignores its seed and draw index: left zero, its parameters
    // stay the same from step to step (the parameters' device cache below).
    const bool draws = row.temperature != 0.0f && row.forced_token < 0;
    p.seed = draws ? row.seed : 0;
    p.draw_index = draws ? row.draw_index : 0;
    p.work_row = -1;
    p.mask_begin = -1;
    p.forced_token = std::max(-1, row.forced_token);
    call.logprobs[r] = row.logprobs;
    if (row.logprobs > cuda::kSampleMaxTopLogprobs) {
      errors[r] =
          str_cat("sampler: at most ", cuda::kSampleMaxTopLogprobs, " top logprobs, got ", row.logprobs);
    }
    if (row.forced_token >= V) {  // reported; the kernel draws instead of reading outside the row
      errors[r] = str_cat("sampler: forced token ", row.forced_token, " is outside the vocabulary of ", V);
      p.forced_token = -1;
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
    p.bias_begin = static_cast<int32_t>(bias_ids.size());
    DSI_CHECK(row.bias_ids.size() == row.bias_values.size(), "sample: ", row.bias_ids.size(),
              " biased tokens but ", row.bias_values.size(), " biases");
    if (!distinct_ids(row.bias_ids, &errors[r]) || !append_ids(bias_ids, row.bias_ids, V, &errors[r]))
      continue;
    bias_values.insert(bias_values.end(), row.bias_values.begin(), row.bias_values.end());
    p.bias_end = static_cast<int32_t>(bias_ids.size());
    if (!row.allowed.empty()) {
      const size_t words = static_cast<size_t>((V + 31) / 32);
      if (row.allowed.size() < words) {
        errors[r] = str_cat("sampler: an allowed-token mask of ", row.allowed.size(),
                            " words for a vocabulary of ", V);
        continue;
      }
      p.mask_begin = static_cast<int32_t>(masks.size());
      masks.insert(masks.end(), row.allowed.begin(),
                   row.allowed.begin() + static_cast<std::ptrdiff_t>(words));
    }
    p.work_row = work_rows++;
  }

  // Rows that score a given token without penalties (prompt logprobs) go to the scoring kernel; the others
  // are drawn by the sampling kernel (all of them, without a row list, when none is scored).
  std::vector<int32_t> scored, drawn;
  for (int64_t r = 0; r < R; ++r) {
    const bool score = rows[r].forced_token >= 0 && params[r].forced_token >= 0 && params[r].work_row < 0 &&
                       errors[r].empty();
    (score ? scored : drawn).push_back(static_cast<int32_t>(r));
  }

  // Inputs: one buffer in pinned memory, which the kernel reads over the bus (host_reads.h), or (host reads
  // off) one asynchronous copy of it (a synchronous copy would wait for the forward pass queued before it).
  const bool host_reads = cuda::host_reads_enabled();
  std::vector<char> packed;
  const size_t params_at = append_aligned(packed, params);
  // The row lists only when some row is scored (else the sampling kernel takes every row in order).
  const size_t scored_at = scored.empty() ? 0 : append_aligned(packed, scored);
  const size_t drawn_at = scored.empty() ? 0 : append_aligned(packed, drawn);
  const size_t seen_at = append_aligned(packed, seen);
  const size_t gen_ids_at = append_aligned(packed, gen_ids);
  const size_t gen_counts_at = append_aligned(packed, gen_counts);
  const size_t bias_ids_at = append_aligned(packed, bias_ids);
  const size_t bias_values_at = append_aligned(packed, bias_values);
  const size_t masks_at = append_aligned(packed, masks);
  if (sample_inputs_copied_) cuda::event_wait_host(sample_inputs_copied_);  // the staging is free again
  char* staging = sample_inputs_.reserve(packed.size(), sample_inputs_copied_);
  std::memcpy(staging, packed.data(), packed.size());
  Tensor inputs;
  const char* in = staging;
  if (!host_reads) {
    inputs = Tensor::empty_on(Device::kCuda, DType::U8, {static_cast<int64_t>(packed.size())});
    cuda::copy_to_device_async(inputs.raw(), staging, packed.size());
    in = static_cast<const char*>(inputs.raw());
  }
  if (!sample_inputs_copied_) sample_inputs_copied_ = cuda::event_create();
  if (!host_reads) cuda::event_record(sample_inputs_copied_);

  const int64_t capacity = cuda::sample_candidate_capacity(V);
  Tensor work;  // [rows with penalties, V]: the penalised logits
  if (work_rows > 0) work = Tensor::empty_on(Device::kCuda, DType::F32, {work_rows, V});
  const int64_t D = static_cast<int64_t>(drawn.size());
  Tensor cand_ids, cand_values;  // [drawn rows, capacity]
  if (D > 0) {
    cand_ids = Tensor::empty_on(Device::kCuda, DType::I32, {D, capacity});
    cand_values = Tensor::empty_on(Device::kCuda, DType::F32, {D, capacity});
  }
  // The split row max (sampling_kernels.h): per-call parts, counters kept zero from call to call (grown, and
  // zeroed on the stream, when a call has more rows than any before).
  cuda::SampleRowWork parts;
  parts.parts = cuda::sample_row_parts(V);
  Tensor part_keys, part_bad;
  if (parts.parts > 1) {
    if (!sample_row_counters_ || sample_row_counters_.numel() < R) {
      sample_row_counters_ = Tensor::empty_on(Device::kCuda, DType::I32, {std::max<int64_t>(R, 64)});
      cuda::memset_async(sample_row_counters_.raw(), 0, sample_row_counters_.nbytes());
    }
    part_keys = Tensor::empty_on(Device::kCuda, DType::U8, {R * parts.parts * 8});  // [R, parts] u64
    part_bad = Tensor::empty_on(Device::kCuda, DType::I32, {R, parts.parts});
    parts.part_keys = static_cast<uint64_t*>(part_keys.raw());
    parts.part_bad = part_bad.data<int32_t>();
    parts.counters = static_cast<uint32_t*>(sample_row_counters_.raw());
  }
  // The row parameters from the device cache when they equal the last cached call's (a greedy decode step of
  // the same requests), else read from the inputs (over the bus with host reads on) and, when the call has
  // nothing else to upload, copied into the cache by the kernel for the next call.
  const bool params_only = scored.empty() && work_rows == 0 && seen.empty() && gen_ids.empty() &&
                           gen_counts.empty() && bias_ids.empty() && bias_values.empty() && masks.empty();
  const size_t params_bytes = params.size() * sizeof(cuda::SampleRowParams);
  const char* params_raw = reinterpret_cast<const char*>(params.data());
  const bool params_cached = params_only && sample_params_cached_.size() == params_bytes &&
                             std::memcmp(sample_params_cached_.data(), params_raw, params_bytes) == 0;
  cuda::SampleRowParams* params_copy = nullptr;
  sample_params_cache_hits_ += params_cached ? 1 : 0;
  if (params_only && !params_cached) {
    if (!sample_params_cache_ || sample_params_cache_.nbytes() < params_bytes) {
      sample_params_cache_ = Tensor::empty_on(Device::kCuda, DType::U8,
                                              {static_cast<int64_t>(std::max<size_t>(params_bytes, 4096))});
    }
    params_copy = static_cast<cuda::SampleRowParams*>(sample_params_cache_.raw());
    sample_params_cached_.clear();  // until the kernel that fills the cache is queued
  }
  const int64_t result_bytes = R * static_cast<int64_t>(sizeof(cuda::SampleRowResult));
  call.results = Tensor::empty_on(Device::kCuda, DType::U8, {result_bytes});  // [R] SampleRowResult
  // Results: the kernel also writes them into pinned memory (host reads on), or one copy queued after it;
  // sample_wait waits for the event.
  char* out = sample_outputs_.reserve(static_cast<size_t>(result_bytes), sample_outputs_copied_);
  const auto* device_params = params_cached
                                  ? static_cast<const cuda::SampleRowParams*>(sample_params_cache_.raw())
                                  : reinterpret_cast<const cuda::SampleRowParams*>(in + params_at);
  auto* results = static_cast<cuda::SampleRowResult*>(call.results.raw());
  auto* host_results = host_reads ? reinterpret_cast<cuda::SampleRowResult*>(out) : nullptr;
  if (D > 0) {
    cuda::launch_sample_rows(
        logits.data<float>(), D, V, device_params,
        seen.empty() ? nullptr : reinterpret_cast<const int32_t*>(in + seen_at),
        gen_ids.empty() ? nullptr : reinterpret_cast<const int32_t*>(in + gen_ids_at),
        gen_counts.empty() ? nullptr : reinterpret_cast<const int32_t*>(in + gen_counts_at),
        bias_ids.empty() ? nullptr : reinterpret_cast<const int32_t*>(in + bias_ids_at),
        bias_values.empty() ? nullptr : reinterpret_cast<const float*>(in + bias_values_at),
        masks.empty() ? nullptr : reinterpret_cast<const uint32_t*>(in + masks_at),
        work ? work.data<float>() : nullptr, cand_ids.data<int32_t>(), cand_values.data<float>(), parts,
        results, host_results, scored.empty() ? nullptr : reinterpret_cast<const int32_t*>(in + drawn_at),
        params_copy);
    if (params_copy != nullptr) sample_params_cached_.assign(params_raw, params_raw + params_bytes);
  }
  cuda::launch_score_rows(logits.data<float>(), V, reinterpret_cast<const int32_t*>(in + scored_at),
                          static_cast<int64_t>(scored.size()), device_params, results, host_results);
  if (host_reads) {
    cuda::event_record(sample_inputs_copied_);  // the kernel has read the staging
  } else {
    cuda::copy_to_host_async(out, call.results.raw(), static_cast<size_t>(result_bytes));
  }
  if (!sample_outputs_copied_) sample_outputs_copied_ = cuda::event_create();
  cuda::event_record(sample_outputs_copied_);
  call.pending = true;
  sample_ = std::move(call);
}

std::vector<SampledToken> CudaBackend::sample_wait() {
  DSI_CHECK(sample_.pending, "sample_wait: no sample_async call is pending");
  sample_.pending = false;
  if (!sample_.on_device) return Backend::sample_wait();
  const int32_t R = sample_.rows, V = sample_.vocab;
  if (R == 0) return {};
  cuda::event_wait_host(sample_outputs_copied_);  // the kernel ran and its results are in pinned memory
  const auto* host = reinterpret_cast<const cuda::SampleRowResult*>(sample_outputs_.data());
  std::vector<SampledToken> out(R);
  for (int32_t r = 0; r < R; ++r) {
    const cuda::SampleRowResult& h = host[r];
    SampledToken& t = out[r];
    if (!sample_.errors[r].empty()) {
      t.error = sample_.errors[r];
    } else if (h.error == cuda::kSampleBadLogit) {
      t.error = "sampler: a logit is NaN or +inf";
    } else if (h.error == cuda::kSampleAllMasked) {
      t.error = "sampler: every logit is -inf";
    } else {
      DSI_CHECK(h.token >= 0 && h.token < V, "sample: the kernel returned token ", h.token, " for row ", r);
      t.token = h.token;
      if (sample_.logprobs[r] > 0) {
        t.logprob = h.logprob;
        for (int32_t i = 0; i < h.num_top; ++i) t.top.emplace_back(h.top_ids[i], h.top_logprobs[i]);
      }
    }
  }
  return out;
}

void CudaBackend::feed_sampled_tokens(BatchPlan& plan) {
  if (!sample_.on_device) Backend::feed_sampled_tokens(plan);  // host ids; else begin_step patches the device
}

void CudaBackend::upload_and_feed(const BatchPlan& plan) {
  const bool feed = sample_.on_device && !cuda::capturing() && plan.feeds_sampled_tokens();
  if (feed) {
    for (int32_t r : plan.prev_sample_rows) {
      DSI_CHECK(r < sample_.rows, "feed_sampled_tokens: row ", r, " of a sampling call of ", sample_.rows,
                " rows");
    }
  }
  cuda::HostReadFeed f;
  f.results = static_cast<const cuda::SampleRowResult*>(sample_.results.raw());
  f.rows = sample_.rows;
  f.vocab = sample_.vocab;
  step_.upload(plan, context_bound_, feed ? &f : nullptr);  // the upload's kernel feeds when it can
  if (!feed || step_.fed()) return;
  cuda::launch_feed_sampled_tokens(step_.token_ids_for_feed(), step_.device().prev_sample_rows,
                                   plan.num_tokens(), f.results, sample_.rows, sample_.vocab);
}

}  // namespace dsinfer
