// Device matrices that carry their packed copy for the decode GEMV (gemv_packed.h) in the same allocation,
// the copy registered while the allocation lives, so that launch_gemv and the MoE units launches find it:
// the dense MLP's gate/up and the LM head (prepare_named_weight), and with CudaBackendOptions::
// moe_units_packed a MoE block's stacked experts and shared experts (prepare_experts,
// prepare_shared_experts).
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace dsinfer::cuda {

// Bytes of one such allocation for a [N, K] bf16 matrix: the row-major part (rounded up to 256) and the copy.
int64_t matrix_with_packed_copy_bytes(int64_t N, int64_t K);

// A [N, K] bf16 device matrix whose row-major part `fill` writes (given its device address; N K 2 bytes),
// followed by its packed copy, made from it and registered (gemv_register_packed) until the allocation goes.
// Fails when the GPU has no room for it.
Tensor matrix_with_packed_copy(int64_t N, int64_t K, const std::function<void(void* row_major)>& fill);

}  // namespace dsinfer::cuda
