// Host-to-device transfers by kernels reading page-locked host memory (host_reads.cu), for the few small
// transfers of every decode step; CUDA-header free.
#pragma once
#include <cstddef>

namespace dsinfer::cuda {

// The largest transfer copy_from_host_by_kernel takes (one block reads it; larger ones go to the copy
// engine).
constexpr size_t kHostReadMaxBytes = size_t{64} << 10;

// Whether small per-step transfers go through kernels that read host memory (DSINFER_CUDA_HOST_READS, default
// 1; 0: the copy engine as before). Read once.
bool host_reads_enabled();

// dst (device) = pinned_src (page-locked host memory from host_alloc_pinned), `bytes` <= kHostReadMaxBytes,
// queued on the stream as one kernel: the host must leave pinned_src untouched until the stream passes it.
void copy_from_host_by_kernel(void* dst, const void* pinned_src, size_t bytes);

}  // namespace dsinfer::cuda
