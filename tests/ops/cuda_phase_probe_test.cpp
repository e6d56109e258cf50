// The phase probe (backend/cuda/phase_probe.h): every barrier of a persistent launch holds, with the slice
// loaded after the barrier or through a ring kept in flight across it, launched directly and replayed from a
// CUDA graph; launches that could deadlock are refused; and (disabled, a benchmark) what a phase boundary
// costs against a kernel handoff, alone and with each phase streaming weights (runs where a GPU is visible;
// CI compiles it and skips).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/handoff_probe.h"
#include "backend/cuda/latency_probe.h"
#include "backend/cuda/phase_probe.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#include "cuda_probe_buffers.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda::PhaseStream;

// One way of streaming: the mode and, for the ring, its stages.
struct Way {
  PhaseStream mode;
  int stages;
  std::string name() const {
    return mode == PhaseStream::kAfterBarrier ? "after barrier" : "ring " + std::to_string(stages);
  }
};

const Way kWays[] = {{PhaseStream::kAfterBarrier, 0},
                     {PhaseStream::kRing, 4},
                     {PhaseStream::kRing, 8},
                     {PhaseStream::kRing, 12}};

// A chain of `phases` phases over probe buffers (the barrier's counter in flags[0]).
struct Chain : ProbeBuffers {
  using ProbeBuffers::ProbeBuffers;
  void launch(const Way& w, const uint32_t* chain = nullptr, int hops = 0) const {
    cuda::launch_phase_chain(w.mode, w.stages, steps, blocks, vals, flags, src, float4_per_step, chain, hops);
  }
  // The same chain as a kernel a phase, handed over by the PDL wait (handoff_probe.h).
  void launch_handoffs() const {
    cuda::launch_handoff_chain(cuda::Handoff::kPdlWait, steps, blocks, vals, flags, src, float4_per_step);
  }
};

// A device copy of a hop chain (latency_probe.h) for the phases' latency-bound part.
struct DeviceChain {
  uint32_t* ptr = nullptr;
  explicit DeviceChain(int64_t lines) {
    const std::vector<uint32_t> host = cuda::make_hop_chain(lines, 5);
    ptr = static_cast<uint32_t*>(cuda::device_alloc(host.size() * sizeof(uint32_t)));
    if (ptr) cuda::copy_to_device(ptr, host.data(), host.size() * sizeof(uint32_t));
  }
  DeviceChain(const DeviceChain&) = delete;
  DeviceChain& operator=(const DeviceChain&) = delete;
  ~DeviceChain() { cuda::device_free(ptr); }
};

class CudaPhaseProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaPhaseProbeTest, EveryBarrierHoldsInEveryWay) {
  const int sms = cuda::device_sm_count(0);
  ASSERT_GT(sms, 0);
  const DeviceChain chain(64);
  ASSERT_NE(chain.ptr, nullptr);
  for (const Way& w : kWays) {
    const int most = cuda::phase_chain_max_blocks(w.mode, w.stages);
    ASSERT_GE(most, sms) << w.name();
    // One block; one per SM; every block that fits. Slices: none, several stages a block, and a size that
    // is no multiple of anything (the last block's share short, zero-filled pieces).
    for (int blocks : {1, sms, most}) {
      for (int64_t n4 : {int64_t{0}, int64_t{4096} * sms, int64_t{100003}}) {
        Chain c(40, blocks, n4);
        ASSERT_TRUE(c.ok());
        c.launch(w);
        cuda::synchronize();
        for (float v : c.last()) ASSERT_EQ(v, 40.0f) << w.name() << ", " << blocks << " blocks, " << n4;
        cuda::time_graph_ms([&] { c.launch(w); }, 3);
        cuda::synchronize();
        for (float v : c.last())
          ASSERT_EQ(v, 40.0f) << w.name() << ", " << blocks << " blocks, " << n4 << ", graph";
        c.launch(w, chain.ptr, 5);  // each phase starting with 5 dependent loads
        cuda::synchronize();
        for (float v : c.last())
          ASSERT_EQ(v, 40.0f) << w.name() << ", " << blocks << " blocks, " << n4 << ", with hops";
      }
    }
  }
}

TEST_F(CudaPhaseProbeTest, RefusesWhatCouldDeadlockOrIsNotCompiled) {
  for (const Way& w : kWays) {
    const int most = cuda::phase_chain_max_blocks(w.mode, w.stages);
    Chain c(2, most + 1, 0);
    ASSERT_TRUE(c.ok());
    EXPECT_THROW(c.launch(w), Error) << w.name();
  }
  EXPECT_FALSE(cuda::phase_ring_stages_supported(5));
  EXPECT_THROW(cuda::phase_chain_max_blocks(PhaseStream::kRing, 5), Error);
  Chain c(2, 1, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_THROW(cuda::launch_phase_chain(PhaseStream::kRing, 5, 2, 1, c.vals, c.flags, c.src, 0), Error);
  EXPECT_THROW(cuda::launch_phase_chain(PhaseStream::kRing, 4, 0, 1, c.vals, c.flags, c.src, 0), Error);
  EXPECT_THROW(cuda::launch_phase_chain(PhaseStream::kRing, 4, 2, 1, c.vals, c.flags, c.src, 0, nullptr, 3),
               Error);  // hops without a chain
  cuda::synchronize();
}

// What a phase costs, us per phase: the PDL handoff chain (a kernel per phase) against one persistent launch
// with barriers, at the sizes of V2-Lite's small decode matrices (1 MB: W_UK / W_UV; 8 MB: o_proj; 16 MB:
// q + kv_a) and none. "over copy": minus the slice's bytes at the copy bandwidth measured first.
TEST_F(CudaPhaseProbeTest, DISABLED_BenchPhases) {
  constexpr int kPhases = 64;
  const int sms = cuda::device_sm_count(0);
  const double gbs = cuda::measure_copy_gbs(int64_t{1} << 30, 10);
  ASSERT_GT(gbs, 0.0);
  std::printf("copy bandwidth %.0f GB/s, %d SMs, %d phases a launch\n\n", gbs, sms, kPhases);
  std::printf("| way | blocks | MB a phase | us a phase | us over copy |\n|---|---|---|---|---|\n");
  for (int64_t mb : {0, 1, 4, 8, 16}) {
    for (int blocks : {sms, 2 * sms}) {
      const int64_t n4 = mb * 1024 * 1024 / 16;
      Chain c(kPhases, blocks, n4);
      ASSERT_TRUE(c.ok());
      const double copy_us = static_cast<double>(mb) * 1024 * 1024 / (gbs * 1e3);
      auto row = [&](const std::string& name, const std::function<void()>& launch) {
        const double us = cuda::time_graph_ms(launch, 20) * 1e3 / kPhases;
        for (float v : c.last()) ASSERT_EQ(v, static_cast<float>(kPhases)) << name;
        std::printf("| %s | %d | %lld | %.2f | %.2f |\n", name.c_str(), blocks, static_cast<long long>(mb),
                    us, us - copy_us);
      };
      row("pdl handoff (a kernel a phase)", [&] { c.launch_handoffs(); });
      for (const Way& w : kWays) {
        if (blocks > cuda::phase_chain_max_blocks(w.mode, w.stages)) continue;
        row("barrier, " + w.name(), [&] { c.launch(w); });
      }
    }
  }
  // Each phase led by 16 dependent loads through L2 (about what an attention or routing step chains), one
  // block an SM: the ring streams during them, the after-barrier loop cannot. Overlap shows as a phase
  // costing about max(hops, slice) instead of their sum.
  const DeviceChain chain(4096);
  ASSERT_NE(chain.ptr, nullptr);
  constexpr int kHops = 16;
  std::printf("\n| way | %d hops, then MB a phase | us a phase | us over copy |\n|---|---|---|---|\n", kHops);
  for (int64_t mb : {0, 4, 8, 16}) {
    const int64_t n4 = mb * 1024 * 1024 / 16;
    Chain c(kPhases, sms, n4);
    ASSERT_TRUE(c.ok());
    const double copy_us = static_cast<double>(mb) * 1024 * 1024 / (gbs * 1e3);
    for (const Way& w : {kWays[0], kWays[3]}) {
      const double us = cuda::time_graph_ms([&] { c.launch(w, chain.ptr, kHops); }, 20) * 1e3 / kPhases;
      for (float v : c.last()) ASSERT_EQ(v, static_cast<float>(kPhases)) << w.name();
      std::printf("| %s | %lld | %.2f | %.2f |\n", w.name().c_str(), static_cast<long long>(mb), us,
                  us - copy_us);
    }
  }
}

#endif

}  // namespace
}  // namespace dsinfer
