// CUDA-event and CUDA-graph timing behind timing.h.
#include <cuda_runtime.h>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/timing.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

// Milliseconds per call of run() over reps calls, by events on stream().
template <typename F>
double events_ms(F&& run, int reps) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event create");
  check_cuda(cudaEventCreate(&stop), "event create");
  check_cuda(cudaEventRecord(start, stream()), "event record");
  for (int i = 0; i < reps; ++i) run();
  check_cuda(cudaEventRecord(stop, stream()), "event record");
  check_cuda(cudaEventSynchronize(stop), "event synchronize");
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "event elapsed time");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / reps;
}

}  // namespace

double time_stream_ms(const std::function<void()>& body, int reps) {
  body();
  check_cuda(cudaStreamSynchronize(stream()), "warmup");
  return events_ms(body, reps);
}

double time_graph_ms(const std::function<void()>& body, int reps) {
  body();
  check_cuda(cudaStreamSynchronize(stream()), "warmup");
  cudaGraph_t graph;
  check_cuda(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), "begin capture");
  body();
  check_cuda(cudaStreamEndCapture(stream(), &graph), "end capture");
  cudaGraphExec_t exec;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
  check_cuda(cudaGraphLaunch(exec, stream()), "graph launch");
  check_cuda(cudaStreamSynchronize(stream()), "graph warmup");
  const double ms = events_ms([&] { check_cuda(cudaGraphLaunch(exec, stream()), "graph launch"); }, reps);
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
