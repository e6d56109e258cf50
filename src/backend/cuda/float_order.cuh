// Order-preserving bits of a float (larger floats give larger unsigned values; -0 below +0) and back: the
// value half of the 64-bit selection keys of the sampling and scoring kernels.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

__device__ __forceinline__ uint32_t ordered_bits(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}

}  // namespace dsinfer::cuda
