// Attribution of a GPU timeline to kernels (the CUDA kernel trace, kernel_trace.cpp). Where kernels overlap
// (programmatic dependent launch lets a kernel start, and wait, before the one ahead of it ends), summed
// durations count the waits and overlaps more than once; this walks the kernels in start order and charges
// each one the time by which it extends the end of everything that started before it ("wall") and the idle
// time between that end and its own start ("idle before": no kernel running, e.g. host-bound gaps). Per
// name, wall + idle before over all names adds up to the span from the first start to the last end. Also the
// last kernels in start order, the trace's raw timeline tail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsinfer {

// One kernel's run on the GPU clock (ns) and its name's index.
struct KernelSpan {
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t name = 0;
};

// A name's share of the timeline.
struct KernelWall {
  uint64_t wall_ns = 0;         // time by which its kernels extended the busy timeline
  uint64_t idle_before_ns = 0;  // idle time just before its kernels started
};

// spans in any order; every name index < names. Returns one entry per name index.
std::vector<KernelWall> attribute_timeline(std::vector<KernelSpan> spans, size_t names);

// The n latest-starting spans (all of them when there are fewer), in start order (ties: earlier end first).
std::vector<KernelSpan> last_in_start_order(std::vector<KernelSpan> spans, size_t n);

}  // namespace dsinfer
