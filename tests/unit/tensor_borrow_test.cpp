// Tensor::borrow: a borrowed tensor points at the caller's memory, names the device the memory is on, and
// keeps its owner alive exactly as long as some tensor (or view) of it lives.
#include <gtest/gtest.h>

#include <memory>

#include "core/tensor.h"

namespace dsinfer {
namespace {

TEST(TensorBorrowTest, NamesTheDeviceAndKeepsTheOwnerAlive) {
  bool released = false;
  static float storage[12] = {};
  {
    std::shared_ptr<const void> owner(storage, [&released](const void*) { released = true; });
    Tensor t = Tensor::borrow(storage, DType::F32, {3, 4}, std::move(owner), Device::kCuda);
    EXPECT_EQ(t.device(), Device::kCuda);
    EXPECT_FALSE(t.is_cpu());
    EXPECT_EQ(t.raw(), static_cast<const void*>(storage));
    EXPECT_EQ(t.numel(), 12);
    Tensor view = t.rows(1, 3);
    t = Tensor();
    EXPECT_FALSE(released);  // the view still holds the storage
    EXPECT_EQ(view.device(), Device::kCuda);
  }
  EXPECT_TRUE(released);
}

TEST(TensorBorrowTest, DefaultsToHostMemory) {
  static float storage[2] = {1.0f, 2.0f};
  const Tensor t =
      Tensor::borrow(storage, DType::F32, {2}, std::shared_ptr<const void>(storage, [](const void*) {}));
  EXPECT_TRUE(t.is_cpu());
  EXPECT_EQ(t.f32()[1], 2.0f);
}

}  // namespace
}  // namespace dsinfer
