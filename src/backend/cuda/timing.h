// GPU timing for benchmarks (CUDA-header free): CUDA events around work on stream(), either launched
// directly or captured once into a CUDA graph and replayed (no host launch cost between kernels).
#pragma once
#include <cstdint>
#include <functional>

namespace dsinfer::cuda {

// Milliseconds per call of body() (all of its work on stream()), over `reps` calls back to back after one
// warmup call.
double time_stream_ms(const std::function<void()>& body, int reps);

// Milliseconds per replay of a CUDA graph captured from one call of body(), over `reps` replays after a
// warmup replay. body() runs once uncaptured first (plans, allocations), then once under capture.
double time_graph_ms(const std::function<void()>& body, int reps);

// Microseconds per copy: one(0), ..., one(copies - 1) captured into one CUDA graph (each call on its own
// copy of the weights, so that the L2 does not serve repeats), timed as time_graph_ms, divided by copies.
double time_graph_us_per_copy(int64_t copies, const std::function<void(int64_t)>& one, int reps);

}  // namespace dsinfer::cuda
