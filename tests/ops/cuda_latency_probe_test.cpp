// The latency probe (backend/cuda/latency_probe.h): its pointer chains are one cycle through every line (host
// only, runs in CI); on a GPU the chase ends where the host's does, alone and beside streaming blocks, and a
// launch that could deadlock is refused; and (disabled, a benchmark) what one dependent round trip costs,
// through L2 and through DRAM, alone and while the other SMs stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/handoff_probe.h"
#include "backend/cuda/latency_probe.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

TEST(LatencyProbeChain, IsOneCycleThroughEveryLine) {
  for (int64_t lines : {2, 3, 64, 1000}) {
    const std::vector<uint32_t> chain = cuda::make_hop_chain(lines, 7);
    ASSERT_EQ(chain.size(), static_cast<size_t>(lines * 32));
    std::vector<int> seen(static_cast<size_t>(lines), 0);
    uint32_t at = 0;
    for (int64_t h = 0; h < lines; ++h) {
      ASSERT_EQ(at % 32, 0u) << "every hop lands on a line's first element";
      ASSERT_LT(at / 32, static_cast<uint32_t>(lines));
      ++seen[at / 32];
      at = chain[at];
    }
    EXPECT_EQ(at, 0u) << lines << " hops come back to the start";
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << lines;
    EXPECT_EQ(cuda::follow_hop_chain(chain, lines), 0u);
    EXPECT_EQ(cuda::follow_hop_chain(chain, 1), chain[0]);
    for (size_t i = 0; i < chain.size(); ++i) {
      if (i % 32 != 0) {
        ASSERT_EQ(chain[i], 0u);
      }
    }
  }
}

TEST(LatencyProbeChain, DependsOnTheSeedOnly) {
  EXPECT_EQ(cuda::make_hop_chain(500, 1), cuda::make_hop_chain(500, 1));
  EXPECT_NE(cuda::make_hop_chain(500, 1), cuda::make_hop_chain(500, 2));
  EXPECT_THROW(cuda::make_hop_chain(1, 1), Error);
  EXPECT_THROW(cuda::make_hop_chain(int64_t{1} << 28, 1), Error);
}

// Device copies of a chain and of a buffer to stream (zeros), and the probe's scratch.
struct Probe {
  std::vector<uint32_t> host;
  uint32_t* chain = nullptr;
  void* src = nullptr;
  void* scratch = nullptr;
  int64_t n4;
  Probe(int64_t lines, int64_t stream_bytes, int max_stream_blocks) : n4(stream_bytes / 16) {
    host = cuda::make_hop_chain(lines, 11);
    chain = static_cast<uint32_t*>(cuda::device_alloc(host.size() * sizeof(uint32_t)));
    if (chain) cuda::copy_to_device(chain, host.data(), host.size() * sizeof(uint32_t));
    src = cuda::device_alloc(static_cast<size_t>(std::max<int64_t>(stream_bytes, 16)));
    if (src) cuda::zero_handoff_source(src, static_cast<size_t>(std::max<int64_t>(stream_bytes, 16)));
    scratch = cuda::device_alloc(cuda::hop_probe_scratch_bytes(max_stream_blocks));
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  ~Probe() {
    cuda::device_free(chain);
    cuda::device_free(src);
    cuda::device_free(scratch);
  }
  bool ok() const { return chain && src && scratch; }
  cuda::HopTiming run(int64_t hops, int stream_blocks) const {
    return cuda::run_hop_probe(chain, hops, stream_blocks, src, n4, scratch);
  }
};

class CudaLatencyProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaLatencyProbeTest, TheChaseEndsWhereTheHostsDoesBesideAnyStream) {
  const int sms = cuda::device_sm_count(0);
  const int most = cuda::hop_probe_max_blocks();
  ASSERT_GE(most, 2 * sms);
  Probe p(4096, int64_t{64} << 20, most);
  ASSERT_TRUE(p.ok());
  for (int64_t hops : {1, 777, 5000}) {
    for (int blocks : {0, 1, sms - 1, most - 1}) {
      const cuda::HopTiming t = p.run(hops, blocks);
      EXPECT_EQ(t.last, cuda::follow_hop_chain(p.host, hops)) << hops << " hops, " << blocks << " streamers";
      EXPECT_GT(t.cycles, 0) << hops << " hops, " << blocks << " streamers";
    }
  }
  EXPECT_THROW(p.run(10, most), Error);  // one block more than can be resident
  EXPECT_THROW(cuda::run_hop_probe(p.chain, 10, 4, p.src, 4 * 256 - 1, p.scratch),
               Error);  // too little to stream
}

// Cycles and nanoseconds per dependent hop: a 4 MB chain (in L2 after the warm pass) and a 512 MB one (mostly
// DRAM, and TLB misses), alone and beside one or two streaming blocks an SM.
TEST_F(CudaLatencyProbeTest, DISABLED_BenchHops) {
  const int sms = cuda::device_sm_count(0);
  std::printf("copy bandwidth %.0f GB/s, %d SMs\n\n", cuda::measure_copy_gbs(int64_t{1} << 30, 10), sms);
  std::printf(
      "| chain | hops | streaming blocks | cycles a hop | ns a hop | SM GHz |\n|---|---|---|---|---|---|\n");
  struct Case {
    const char* name;
    int64_t lines, hops;
  };
  for (const Case& c : {Case{"4 MB (L2)", 32768, 8192}, Case{"512 MB (DRAM)", int64_t{4} << 20, 4096}}) {
    Probe p(c.lines, int64_t{1} << 30, 2 * sms);
    ASSERT_TRUE(p.ok());
    for (int blocks : {0, sms - 1, 2 * sms - 1}) {
      const cuda::HopTiming t = p.run(c.hops, blocks);
      ASSERT_EQ(t.last, cuda::follow_hop_chain(p.host, c.hops));
      std::printf("| %s | %lld | %d | %.0f | %.1f | %.2f |\n", c.name, static_cast<long long>(c.hops), blocks,
                  static_cast<double>(t.cycles) / c.hops, static_cast<double>(t.ns) / c.hops,
                  t.ns > 0 ? static_cast<double>(t.cycles) / t.ns : 0.0);
    }
  }
}

#endif

}  // namespace
}  // namespace dsinfer
