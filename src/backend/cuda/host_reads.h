// Host-to-device transfers by kernels reading page-locked host memory (host_reads.cu), for the few small
// transfers of every decode step; CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

struct SampleRowResult;

// The largest transfer copy_from_host_by_kernel takes (one block reads it; larger ones go to the copy
// engine).
constexpr size_t kHostReadMaxBytes = size_t{64} << 10;

// Whether small per-step transfers go through kernels that read host memory (DSINFER_CUDA_HOST_READS, default
// 1; 0: the copy engine as before). Read once.
bool host_reads_enabled();

// The tokens of the previous sampling call fed into a copied step plan by the copy's kernel (what
// launch_feed_sampled_tokens does as a kernel of its own): token_ids[t] = results[prev_rows[t]].token (0 when
// that is outside [0, vocab)) for every t < tokens with prev_rows[t] in [0, rows), where token_ids and
// prev_rows are int32 arrays at these byte offsets of the copy's destination.
struct HostReadFeed {
  size_t token_ids_at = 0, prev_rows_at = 0;
  int32_t tokens = 0;
  const SampleRowResult* results = nullptr;  // device
  int32_t rows = 0, vocab = 0;
};

// dst (device) = pinned_src (page-locked host memory from host_alloc_pinned), `bytes` <= kHostReadMaxBytes,
// queued on the stream as one kernel, then the feed when one is given: the host must leave pinned_src
// untouched until the stream passes it. The kernel is a programmatic dependent launch (pdl.cuh): its first
// reads of pinned_src overlap the previous kernel, its writes wait for it.
void copy_from_host_by_kernel(void* dst, const void* pinned_src, size_t bytes,
                              const HostReadFeed* feed = nullptr);

}  // namespace dsinfer::cuda
