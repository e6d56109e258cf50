// A sampling or scoring row's result written by the threads that hold its parts, into the device result and,
// when asked, into page-locked host memory, so that no copy-engine transfer follows the kernel and nothing is
// read back through the memory system first (sampling_kernels.cu, scoring_kernels.cu).
#pragma once
#include <cstdint>

#include "backend/cuda/sampling_kernels.h"

namespace dsinfer::cuda {

// Row r's header (token, error, logprob, num_top) into out and host_results[r] (when not null). One thread
// of the row's block calls it; the host reads only the num_top top entries after it.
__device__ __forceinline__ void write_result_header(SampleRowResult& out, SampleRowResult* host_results,
                                                    int64_t r, int32_t token, int32_t error, float logprob,
                                                    int32_t num_top) {
  out.token = token;
  out.error = error;
  out.logprob = logprob;
  out.num_top = num_top;
  if (host_results == nullptr) return;
  SampleRowResult& h = host_results[r];
  h.token = token;
  h.error = error;
  h.logprob = logprob;
  h.num_top = num_top;
}

// Top entry i of row r into out and host_results[r] (when not null), by the thread that computed it.
__device__ __forceinline__ void write_result_top(SampleRowResult& out, SampleRowResult* host_results,
                                                 int64_t r, int i, int32_t id, float logprob) {
  out.top_ids[i] = id;
  out.top_logprobs[i] = logprob;
  if (host_results == nullptr) return;
  host_results[r].top_ids[i] = id;
  host_results[r].top_logprobs[i] = logprob;
}

}  // namespace dsinfer::cuda
