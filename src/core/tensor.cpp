// Host tensor storage, views and dtype conversion.
#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace dsinfer {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* device_name(Device device) {
  return device == Device::kCpu ? "cpu" : "cuda";
}

namespace {

DeviceAllocator& allocator_for(Device device) {
  static DeviceAllocator allocators[2];
  return allocators[static_cast<int>(device)];
}

}  // namespace

void register_device_allocator(Device device, DeviceAllocator allocator) {
  allocator_for(device) = allocator;
}

Tensor Tensor::empty_on(Device device, DType dtype, Shape shape) {
  if (device == Device::kCpu) return empty(dtype, std::move(shape));
  for (int64_t d : shape) DSI_CHECK(d >= 0, "negative tensor dimension in ", shape_str(shape));
  const DeviceAllocator& a = allocator_for(device);
  DSI_CHECK(a.alloc && a.free, "no allocator registered for ", device_name(device), " tensors");
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  const size_t bytes = std::max<size_t>(t.nbytes(), 256);
  void* p = a.alloc(bytes);
  if (!p)
    fail("out of ", device_name(device), " memory allocating ", bytes, " bytes for a tensor ",
         shape_str(t.shape_));
  auto release = a.free;
  t.storage_ = std::shared_ptr<void>(p, [release](void* q) { release(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  for (int64_t d : shape) DSI_CHECK(d >= 0, "negative tensor dimension in ", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) fail("out of host memory allocating ", alloc, " bytes for a tensor ", shape_str(t.shape_));
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape) {
  DSI_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_f32: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  Tensor t = empty(DType::F32, std::move(shape));
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::borrow(const void* data, DType dtype, Shape shape, std::shared_ptr<const void> owner,
                      Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.storage_ = std::move(owner);
  t.data_ = const_cast<void*>(data);
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  DSI_CHECK(j >= 0 && j < n, "dimension ", i, " out of range for shape ", shape_str(shape_));
  return shape_[j];
}

Tensor Tensor::reshape(Shape shape) const {
  DSI_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  DSI_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "rows [", begin, ", ", end,
            ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] ? shape_[0] : 1);
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone() const {
  DSI_CHECK(is_cpu(), "clone of a ", device_name(device_), " tensor: copy it to the host first");
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::to_f32() const {
  DSI_CHECK(is_cpu(), "to_f32 of a ", device_name(device_), " tensor: copy it to the host first");
  if (dtype_ == DType::F32) return clone();
  Tensor t = empty(DType::F32, shape_);
  float* out = t.f32();
  const int64_t n = numel();
  const auto* bytes = static_cast<const uint8_t*>(data_);
  switch (dtype_) {
    case DType::BF16: {
      const auto* p = static_cast<const uint16_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      break;
    }
    case DType::F16: {
      const auto* p = static_cast<const uint16_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
      break;
    }
    case DType::F64: {
      const auto* p = static_cast<const double*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
      break;
    }
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) out[i] = f8e4m3_to_f32(bytes[i]);
      break;
    case DType::F8_E8M0:
      for (int64_t i = 0; i < n; ++i) out[i] = e8m0_to_f32(bytes[i]);
      break;
    case DType::I8: {
      const auto* p = static_cast<const int8_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
      break;
    }
    case DType::U8:
    case DType::BOOL:
      for (int64_t i = 0; i < n; ++i) out[i] = bytes[i];
      break;
    case DType::I16: {
      const auto* p = static_cast<const int16_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
      break;
    }
    case DType::I32: {
      const auto* p = static_cast<const int32_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
      break;
    }
    case DType::I64: {
      const auto* p = static_cast<const int64_t*>(data_);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
      break;
    }
    case DType::F32:
      break;
  }
  return t;
}

float* Tensor::checked_f32() {
  DSI_CHECK(is_cpu(), "host access to a ", device_name(device_), " tensor");
  DSI_CHECK(dtype_ == DType::F32, "expected a float32 tensor, got ", dtype_name(dtype_));
  return static_cast<float*>(data_);
}

}  // namespace dsinfer
