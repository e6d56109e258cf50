// Micro-benchmark of the CUDA paged-attention kernels at the Llama-3.1-8B attention shape (32 q heads, 8 kv
// heads, head_dim 128, bf16 cache, block size 64): split-KV decode at batch 1/64/256 x context
// 128/256/1024/4096 (µs per layer with the splits merged in the kernel, as the backend runs it, and with the
// separate combine kernel; GB/s of K/V read against the H200's 4.29 TB/s), the fused rope + cache write, and
// causal flash prefill of 2048 tokens (ms per layer and TFLOP/s). Each case is captured once in a CUDA graph
// of kIters launches (which also checks the launches are capture-safe) and timed with CUDA events.
// Run: build/bench/cuda_attention_bench (needs a GPU).
#include <cstdio>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/rope_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace dsinfer;

constexpr int kIters = 20;
constexpr int64_t kHq = 32, kHkv = 8, kD = 128;
constexpr int32_t kBlock = 64;
constexpr double kPeakBytesPerS = 4.29e12;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(what, ": ", cudaGetErrorString(err));
}

Tensor device_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(DType::I32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return cuda::to_device(t);
}
Tensor device_i64(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return cuda::to_device(t);
}
Tensor device_random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Tensor t = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = d(rng);
  return cuda::to_device(t);
}

// Microseconds per call of `launch`: kIters calls captured in a graph, the graph replayed 5 times after a
// warm-up (plain launches when capture fails).
double time_us(const std::function<void()>& launch) {
  cudaStream_t s = cuda::stream();
  launch();
  check(cudaStreamSynchronize(s), "warm-up");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool graphed = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (graphed) {
    for (int i = 0; i < kIters; ++i) launch();
    graphed = cudaStreamEndCapture(s, &graph) == cudaSuccess &&
              cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0) == cudaSuccess;
  }
  if (!graphed) {
    cudaGetLastError();
    std::printf("  (graph capture failed; timing plain launches)\n");
  }
  auto run = [&] {
    if (graphed) {
      check(cudaGraphLaunch(exec, s), "graph launch");
    } else {
      for (int i = 0; i < kIters; ++i) launch();
    }
  };
  run();
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  constexpr int kReps = 5;
  check(cudaEventRecord(a, s), "record");
  for (int r = 0; r < kReps; ++r) run();
  check(cudaEventRecord(b, s), "record");
  check(cudaEventSynchronize(b), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return ms * 1000.0 / (kReps * kIters);
}

// A paged bf16 cache of one layer for `seqs` sequences of `ctx` positions, block tables scrambled.
struct PagedSetup {
  Tensor cache, positions, token_seq, table, indptr, slots;
  cuda::DevicePlanView plan;
  cuda::DeviceCacheView view;
  std::vector<int32_t> host_positions;
};

PagedSetup make_setup(int64_t seqs, int64_t ctx, bool all_positions) {
  PagedSetup p;
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock, blocks = seqs * blocks_per_seq;
  const int64_t width = kHkv * 2 * kD;
  p.cache = Tensor::empty_on(Device::kCuda, DType::BF16, {blocks * kBlock, width});
  check(cudaMemsetAsync(p.cache.raw(), 0, p.cache.nbytes(), cuda::stream()), "memset");
  std::vector<int32_t> table, indptr = {0}, token_seq;
  std::vector<int64_t> slots;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b)
      table.push_back(static_cast<int32_t>((s * blocks_per_seq + b) * 7919 % blocks));
    indptr.push_back(static_cast<int32_t>(table.size()));
    for (int64_t pos = all_positions ? 0 : ctx - 1; pos < ctx; ++pos) {
      p.host_positions.push_back(static_cast<int32_t>(pos));
      token_seq.push_back(static_cast<int32_t>(s));
      slots.push_back(static_cast<int64_t>(table[s * blocks_per_seq + pos / kBlock]) * kBlock + pos % kBlock);
    }
  }
  p.positions = device_i32(p.host_positions);
  p.token_seq = device_i32(token_seq);
  p.table = device_i32(table);
  p.indptr = device_i32(indptr);
  p.slots = device_i64(slots);
  p.plan = {p.positions.data<int32_t>(), p.token_seq.data<int32_t>(), p.table.data<int32_t>(),
            p.indptr.data<int32_t>(), kBlock};
  p.view = {p.cache.raw(), width, true};
  return p;
}

void bench_decode(std::mt19937& rng) {
  std::printf("decode (Hq %lld, Hkv %lld, D %lld, bf16 cache, block %d): one layer\n",
              static_cast<long long>(kHq), static_cast<long long>(kHkv), static_cast<long long>(kD), kBlock);
  std::printf("%6s %8s %7s %10s %12s %10s %8s %14s\n", "batch", "context", "splits", "attn_us", "unfused_us",
              "GB/s", "%peak", "rope+write_us");
  const cuda::GqaShape shape{kHq, kHkv, kD, kD, 1.0f / std::sqrt(static_cast<float>(kD))};
  for (int64_t batch : {1, 64, 256}) {
    for (int64_t ctx : {128, 256, 1024, 4096}) {
      PagedSetup p = make_setup(batch, ctx, false);
      Tensor q = device_random(batch * kHq * kD, rng), k = device_random(batch * kHkv * kD, rng);
      Tensor v = device_random(batch * kHkv * kD, rng);
      Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {batch, kHq * kD});
      const int64_t max_context = cuda::attention_max_context_bucket(ctx);
      const int64_t floats = cuda::decode_partial_floats(batch, shape, max_context);
      Tensor partials = Tensor::empty_on(Device::kCuda, DType::F32, {std::max<int64_t>(floats, 1)});
      int32_t* arrivals = cuda::decode_arrivals(cuda::decode_arrival_slots(batch, shape, max_context));
      const double us = time_us([&] {
        cuda::launch_attention_decode(q.data<float>(), p.view, p.plan, nullptr, batch, out.data<float>(),
                                      shape, max_context, partials.data<float>(), arrivals);
      });
      const double unfused_us = time_us([&] {
        cuda::launch_attention_decode(q.data<float>(), p.view, p.plan, nullptr, batch, out.data<float>(),
                                      shape, max_context, partials.data<float>(), nullptr);
      });
      std::vector<float> inv_freq(kD / 2);
      for (int64_t i = 0; i < kD / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / kD);
      Tensor freq = cuda::to_device(Tensor::from_f32(inv_freq, {kD / 2}));
      const double rope_us = time_us([&] {
        cuda::launch_rope_write_kv(q.data<float>(), k.data<float>(), v.data<float>(), p.view,
                                   p.positions.data<int32_t>(), p.slots.data<int64_t>(), freq.data<float>(),
                                   batch, kHq, kHkv, kD, kD, kD, 1.0f, false);
      });
      const double bytes = static_cast<double>(batch) * ctx * kHkv * 2 * kD * 2;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("%6lld %8lld %7lld %10.2f %12.2f %10.1f %7.1f%% %14.2f\n", static_cast<long long>(batch),
                  static_cast<long long>(ctx),
                  static_cast<long long>(cuda::decode_splits(batch, shape, max_context)), us, unfused_us, gbs,
                  100.0 * gbs * 1e9 / kPeakBytesPerS, rope_us);
    }
  }
}

void bench_prefill(std::mt19937& rng) {
  constexpr int64_t kTokens = 2048;
  const cuda::GqaShape shape{kHq, kHkv, kD, kD, 1.0f / std::sqrt(static_cast<float>(kD))};
  PagedSetup p = make_setup(1, kTokens, true);
  std::vector<int32_t> tiles;
  for (int32_t t0 = 0; t0 < kTokens; t0 += static_cast<int32_t>(cuda::kFlashTileRows)) {
    const int32_t rows = std::min<int32_t>(static_cast<int32_t>(cuda::kFlashTileRows), kTokens - t0);
    tiles.insert(tiles.end(), {0, t0, rows, t0 + rows});
  }
  Tensor dtiles = device_i32(tiles);
  Tensor q = device_random(kTokens * kHq * kD, rng);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {kTokens, kHq * kD});
  const double us = time_us([&] {
    cuda::launch_attention_flash(q.data<float>(), p.view, p.plan, dtiles.data<int32_t>(),
                                 static_cast<int64_t>(tiles.size() / 4), out.data<float>(), shape);
  });
  // Causal: token t attends t + 1 keys; QK^T and PV are 2 * D flops per (head, query, key) each.
  const double flops = 4.0 * kHq * kD * (static_cast<double>(kTokens) * (kTokens + 1) / 2);
  std::printf("prefill %lld tokens (flash, causal): %.3f ms per layer, %.1f TFLOP/s, x32 layers %.2f ms\n",
              static_cast<long long>(kTokens), us / 1000.0, flops / (us * 1e-6) / 1e12, 32 * us / 1000.0);
  // The same through the decode kernel run per token (the path for prefill shapes flash does not take).
  const int64_t max_context = cuda::attention_max_context_bucket(kTokens);
  const int64_t floats = cuda::decode_partial_floats(kTokens, shape, max_context);
  Tensor partials = Tensor::empty_on(Device::kCuda, DType::F32, {std::max<int64_t>(floats, 1)});
  const double us_dec = time_us([&] {
    cuda::launch_attention_decode(q.data<float>(), p.view, p.plan, nullptr, kTokens, out.data<float>(), shape,
                                  max_context, partials.data<float>());
  });
  std::printf("prefill %lld tokens (decode kernel per token): %.3f ms per layer\n",
              static_cast<long long>(kTokens), us_dec / 1000.0);
}

}  // namespace

int main() {
  if (!dsinfer::cuda::device_available()) {
    std::printf("no CUDA device visible\n");
    return 0;
  }
  dsinfer::cuda::register_allocator();
  std::mt19937 rng(7);
  bench_decode(rng);
  bench_prefill(rng);
  return 0;
}

#else

int main() {
  std::printf("built without CUDA\n");
  return 0;
}

#endif
