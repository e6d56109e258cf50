// Tensors on the GPU: registers the CUDA allocator for Device::kCuda and copies tensors between host and
// device (header-only so that dsinfer_cuda itself stays independent of the core library).
#pragma once
#include "backend/cuda/runtime.h"
#include "core/tensor.h"

namespace dsinfer::cuda {

inline void register_allocator() {
  register_device_allocator(Device::kCuda, {&device_alloc, &device_free});
}

// A device copy of a host tensor (same dtype and shape).
inline Tensor to_device(const Tensor& host) {
  DSI_CHECK(host.is_cpu(), "to_device: the tensor is already on ", device_name(host.device()));
  register_allocator();
  Tensor dev = Tensor::empty_on(Device::kCuda, host.dtype(), host.shape());
  if (host.nbytes()) copy_to_device(dev.raw(), host.raw(), host.nbytes());
  return dev;
}

// A host copy of a device tensor.
inline Tensor to_host(const Tensor& dev) {
  DSI_CHECK(dev.device() == Device::kCuda, "to_host: the tensor is not on the GPU");
  Tensor host = Tensor::empty(dev.dtype(), dev.shape());
  if (dev.nbytes()) copy_to_host(host.raw(), dev.raw(), dev.nbytes());
  return host;
}

}  // namespace dsinfer::cuda
