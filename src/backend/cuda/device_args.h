// Argument checks shared by CudaBackend's ops: a tensor a kernel reads must live on the GPU in the dtype the
// kernel takes (float32 activations, bf16 weights); these return its raw pointer or throw an error naming
// the op and the argument. Header-only glue of dsinfer_lib.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dsinfer::cuda {

// A float32 CUDA tensor (activations).
inline float* dev_f32(const Tensor& x, const char* op, const char* what) {
  DSI_CHECK(x.device() == Device::kCuda && x.dtype() == DType::F32, op, ": ", what,
            " must be a float32 CUDA tensor, got ", dtype_name(x.dtype()), " on ", device_name(x.device()));
  return const_cast<float*>(x.data<float>());
}

// A bf16 CUDA tensor (weights, loaded through prepare_weight).
inline const uint16_t* dev_bf16(const Tensor& w, const char* op, const char* what) {
  DSI_CHECK(w.device() == Device::kCuda && w.dtype() == DType::BF16, op, ": ", what,
            " must be a bf16 CUDA tensor (loaded through prepare_weight), got ", dtype_name(w.dtype()),
            " on ", device_name(w.device()));
  return w.data<uint16_t>();
}

}  // namespace dsinfer::cuda
