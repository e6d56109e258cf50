// The cost of one allowed-token mask from a recogniser state (the JSON and json_schema mask benchmarks):
// mean of 20 computations, printed with the number of tokens allowed.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

#include "engine/json_constraint.h"

namespace dsinfer {

template <class Recognizer>
void print_mask_cost(const TokenTrie& trie, const Recognizer& state, int32_t vocab, const char* label) {
  using Clock = std::chrono::steady_clock;
  std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32);  // [vocab / 32]
  constexpr int kRepeats = 20;
  const auto start = Clock::now();
  for (int i = 0; i < kRepeats; ++i) {
    std::fill(mask.begin(), mask.end(), 0u);
    trie.allowed(state, mask);
  }
  const double each = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / kRepeats;
  size_t allowed = 0;
  for (uint32_t w : mask) allowed += static_cast<size_t>(__builtin_popcount(w));
  std::printf("after '%s': %.3f ms, %zu tokens allowed\n", label, each, allowed);
}

}  // namespace dsinfer
