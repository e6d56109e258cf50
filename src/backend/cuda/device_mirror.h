// DeviceMirror: a device copy of a host array (token ids, row lists, rope frequencies) that is uploaded
// again only when the host contents change. Header-only glue of dsinfer_lib (uses Tensor). The arrays of
// the step's BatchPlan do not come through here (cuda::StepPlan uploads them once per step).
//
// CUDA graphs: during a capture an upload that would copy is refused (the copy would be baked into the
// graph with this step's contents); one that finds its contents already on the device is fine, and marks
// the mirror as read by a graph, so that a later change of its contents bumps graph_invalidations() and
// the graphs are captured again.
#pragma once
#include <cstdint>
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
    const bool same = dev_ && bytes == host_.size() && std::memcmp(host_.data(), v.data(), bytes) == 0;
    if (capturing()) {
      DSI_CHECK(same,
                "an op uploaded per-step data while a CUDA graph was captured (it must read the step "
                "plan instead)");
      read_by_graph_ = true;
      return static_cast<const T*>(dev_.raw());
    }
    if (!same) {
      if (read_by_graph_) invalidate_graphs();
      read_by_graph_ = false;
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
  bool read_by_graph_ = false;
};

}  // namespace dsinfer::cuda
