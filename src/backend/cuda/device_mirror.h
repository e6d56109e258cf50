// DeviceMirror: a device copy of a host array (BatchPlan arrays, token ids, row lists) that is uploaded
// again only when the host contents change, so a forward step copies each plan array once although many
// ops read it. Header-only glue of dsinfer_lib (uses Tensor); all copies run on the legacy default stream,
// ordered after the kernels that read the previous contents.
#pragma once
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_tensor.h"

namespace dsinfer::cuda {

class DeviceMirror {
 public:
  // Device pointer to a copy of `v` (null when v is empty).
  template <typename T>
  const T* upload(const std::vector<T>& v) {
    const size_t bytes = v.size() * sizeof(T);
    if (bytes == 0) return nullptr;
    if (!(dev_ && bytes == host_.size() && std::memcmp(host_.data(), v.data(), bytes) == 0)) {
      host_.assign(reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data()) + bytes);
      if (!dev_ || dev_.nbytes() < bytes) {
        register_allocator();
        dev_ = Tensor::empty_on(Device::kCuda, DType::U8, {static_cast<int64_t>(bytes)});
      }
      copy_to_device(dev_.raw(), v.data(), bytes);
    }
    return static_cast<const T*>(dev_.raw());
  }

 private:
  std::vector<char> host_;  // what dev_ holds
  Tensor dev_;              // [capacity bytes] U8
};

}  // namespace dsinfer::cuda
