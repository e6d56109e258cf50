// Host tensors: a dtype, a row-major contiguous shape and shared storage (owned or borrowed, e.g. mmap).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using Shape = std::vector<int64_t>;

// Where a tensor's bytes live. Device memory comes from an allocator the device's backend registers, so
// core code never includes a device runtime.
enum class Device : uint8_t { kCpu, kCuda };
const char* device_name(Device device);

struct DeviceAllocator {
  void* (*alloc)(size_t bytes) = nullptr;  // returns null on failure
  void (*free)(void* ptr) = nullptr;
};
void register_device_allocator(Device device, DeviceAllocator allocator);

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised / zero-filled owned storage (64-byte aligned).
  static Tensor empty(DType dtype, Shape shape);
  // Uninitialised storage on `device` (its allocator must be registered).
  static Tensor empty_on(Device device, DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Float32 tensor holding a copy of the values.
  static Tensor from_f32(const std::vector<float>& values, Shape shape);
  // Borrows memory kept alive by `owner` (e.g. a memory-mapped file; on `device`, memory its allocator
  // handed out).
  static Tensor borrow(const void* data, DType dtype, Shape shape, std::shared_ptr<const void> owner,
                       Device device = Device::kCpu);

  explicit operator bool() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_ == Device::kCpu; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dimension i; negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  float* f32() { return checked_f32(); }
  const float* f32() const { return const_cast<Tensor*>(this)->checked_f32(); }
  const void* raw() const { return data_; }
  void* raw() { return data_; }

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // A float32 copy (exact conversion from every floating dtype and integers).
  Tensor to_f32() const;
  Tensor clone() const;

 private:
  float* checked_f32();
  std::shared_ptr<const void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Device device_ = Device::kCpu;
  Shape shape_;
};

}  // namespace dsinfer
