// The value of DSINFER_CUDA_SMEM_CARVEOUT (the L1 / shared memory split the decode kernels ask for; see
// prefer_shared_carveout in pdl.cuh): unset or empty give kSmemCarveoutDefault (100, the most shared memory),
// "driver" or -1 give -1 (no preference), 0-100 the percentage of the largest shared memory; anything else
// is an error naming the variable. Host code without CUDA headers, so that it is unit-tested without a GPU
// (tests/unit/smem_carveout_test.cpp).
#pragma once
#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace dsinfer::cuda {

constexpr int kSmemCarveoutDriver = -1;  // cudaSharedmemCarveoutDefault
// The split asked for when the variable is unset: V2-Lite batch 1 -17 to -24 us a token on three H100s, the
// 8B unchanged (docs/benchmarks.md, sixty-third and sixty-fourth sessions; not yet measured on an H200).
constexpr int kSmemCarveoutDefault = 100;

inline int parse_smem_carveout(const char* value) {
  if (value == nullptr || *value == '\0') return kSmemCarveoutDefault;
  const std::string s(value);
  if (s == "driver" || s == "-1") return kSmemCarveoutDriver;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  const bool digits = s[0] >= '0' && s[0] <= '9';  // strtol would also take spaces and signs
  if (!digits || end == value || *end != '\0' || errno != 0 || n > 100)
    throw Error("DSINFER_CUDA_SMEM_CARVEOUT must be \"driver\", -1 or a percentage 0-100, not \"" + s + "\"");
  return static_cast<int>(n);
}

}  // namespace dsinfer::cuda
