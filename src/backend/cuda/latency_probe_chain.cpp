// The latency probe's pointer chains, built and followed on the host (latency_probe.h).
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/latency_probe.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {
constexpr int64_t kLineElements = 32;  // uint32 elements of a 128-byte line
}

std::vector<uint32_t> make_hop_chain(int64_t lines, uint64_t seed) {
  DSI_CHECK(lines >= 2 && lines * kLineElements <= int64_t{1} << 32, "hop chain: ", lines,
            " lines (2 .. 2^27)");
  // order[k] = the line visited k-th; Sattolo's shuffle makes next(order[k]) = order[k + 1] one cycle.
  std::vector<uint32_t> next(static_cast<size_t>(lines));
  for (int64_t l = 0; l < lines; ++l) next[static_cast<size_t>(l)] = static_cast<uint32_t>(l);
  std::mt19937_64 rng(seed);
  for (int64_t i = lines - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i - 1);
    std::swap(next[static_cast<size_t>(i)], next[static_cast<size_t>(pick(rng))]);
  }
  std::vector<uint32_t> chain(static_cast<size_t>(lines * kLineElements), 0u);
  for (int64_t l = 0; l < lines; ++l)
    chain[static_cast<size_t>(l * kLineElements)] =
        static_cast<uint32_t>(next[static_cast<size_t>(l)] * kLineElements);
  return chain;
}

uint32_t follow_hop_chain(const std::vector<uint32_t>& chain, int64_t hops) {
  uint32_t at = 0;
  for (int64_t h = 0; h < hops; ++h) {
    DSI_CHECK(at < chain.size(), "hop chain: element ", at, " outside the chain");
    at = chain[at];
  }
  return at;
}

}  // namespace dsinfer::cuda
