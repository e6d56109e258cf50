// The allocations of packed_matrix.h: the row-major matrix, then its packed copy, registered for their life.
#include "backend/cuda/packed_matrix.h"

#include <memory>
#include <utility>

#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

int64_t row_major_bytes(int64_t N, int64_t K) {
  return (N * K * 2 + 255) / 256 * 256;
}

}  // namespace

int64_t matrix_with_packed_copy_bytes(int64_t N, int64_t K) {
  return row_major_bytes(N, K) + gemv_packed_bytes(N, K);
}

Tensor matrix_with_packed_copy(int64_t N, int64_t K, const std::function<void(void* row_major)>& fill) {
  DSI_CHECK(N > 0 && K > 0 && K % 8 == 0, "matrix_with_packed_copy: unsupported [", N, ", ", K, "]");
  const size_t bytes = static_cast<size_t>(matrix_with_packed_copy_bytes(N, K));
  void* p = device_alloc(bytes);
  if (!p)
    fail("out of GPU memory allocating ", bytes, " bytes for a weight [", N, ", ", K,
         "] and its packed copy");
  auto* w = static_cast<uint16_t*>(p);
  std::shared_ptr<void> owner(p, [w](void* q) {
    gemv_unregister_packed(w);
    device_free(q);
  });
  fill(p);
  auto* packed = reinterpret_cast<uint16_t*>(static_cast<char*>(p) + row_major_bytes(N, K));
  pack_gemv_weight(w, N, K, packed);
  gemv_register_packed(w, packed, N, K);
  return Tensor::borrow(p, DType::BF16, {N, K}, std::move(owner), Device::kCuda);
}

}  // namespace dsinfer::cuda
