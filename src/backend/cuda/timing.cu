// CUDA-event and CUDA-graph timing behind timing.h.
#include <cuda_runtime.h>

#include "backend/cuda/stream.h"
#include "backend/cuda/timing.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(err));
}

// Milliseconds per call of run() over reps calls, by events on stream().
template <typename F>
double events_ms(F&& run, int reps) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event create");
  check(cudaEventCreate(&stop), "event create");
  check(cudaEventRecord(start, stream()), "event record");
  for (int i = 0; i < reps; ++i) run();
  check(cudaEventRecord(stop, stream()), "event record");
  check(cudaEventSynchronize(stop), "event synchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start, stop), "event elapsed time");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / reps;
}

}  // namespace

double time_stream_ms(const std::function<void()>& body, int reps) {
  body();
  check(cudaStreamSynchronize(stream()), "warmup");
  return events_ms(body, reps);
}

double time_graph_ms(const std::function<void()>& body, int reps) {
  body();
  check(cudaStreamSynchronize(stream()), "warmup");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), "begin capture");
  body();
  check(cudaStreamEndCapture(stream(), &graph), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
  check(cudaGraphLaunch(exec, stream()), "graph launch");
  check(cudaStreamSynchronize(stream()), "graph warmup");
  const double ms = events_ms([&] { check(cudaGraphLaunch(exec, stream()), "graph launch"); }, reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

double time_graph_us_per_copy(int64_t copies, const std::function<void(int64_t)>& one, int reps) {
  const double ms = time_graph_ms(
      [&] {
        for (int64_t c = 0; c < copies; ++c) one(c);
      },
      reps);
  return ms * 1e3 / static_cast<double>(copies);
}

}  // namespace dsinfer::cuda
