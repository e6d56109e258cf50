// Kernel trace: with DSINFER_KERNEL_TRACE=FILE set, every kernel the process runs on the GPU (also the
// kernel nodes of replayed CUDA graphs) is timed by CUPTI's activity API at the GPU's own clocks, and at exit
// FILE receives one line per kernel name: total microseconds, launches, mean, share of all kernel time, and
// its share of the timeline where kernels overlap (programmatic dependent launch): the time its kernels added
// to the busy timeline and the idle time just before them (kernel_timeline.h). Copies and memsets are
// timed too, under the names "[copy host to device]" (etc.) and "[memset]".
// CUPTI is loaded at run time (dlopen); without it the trace is off with a warning, nothing else changes.
#pragma once

namespace dsinfer::cuda {

// Starts the trace when DSINFER_KERNEL_TRACE names a file (once per process; later calls do nothing).
void start_kernel_trace_from_env();

}  // namespace dsinfer::cuda
