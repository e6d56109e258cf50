// KeyedMirrors (backend/cuda/keyed_mirrors.h) with a counting fake mirror: alternating arrays upload once
// each, a new array beyond the capacity takes the least recently used copy, and every pointer handed out
// is the copy holding the asked-for contents.
#include "backend/cuda/keyed_mirrors.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsinfer::cuda {
namespace {

// Stands for DeviceMirror: keeps the last uploaded contents as its "device" copy and counts the copies.
struct FakeMirror {
  std::vector<float> device;
  int copies = 0;
  static int total;
  const float* upload(const std::vector<float>& v) {
    if (v.empty()) return nullptr;
    if (device != v) {
      device = v;
      ++copies;
      ++total;
    }
    return device.data();
  }
};
int FakeMirror::total = 0;

TEST(KeyedMirrorsTest, AlternatingArraysUploadOnceEach) {
  FakeMirror::total = 0;
  KeyedMirrors<FakeMirror, 4> m;
  const std::vector<float> main_rope = {1.0f, 0.5f, 0.25f}, compress_rope = {1.0f, 0.1f, 0.01f};
  for (int step = 0; step < 10; ++step) {
    for (const auto* table : {&main_rope, &main_rope, &compress_rope, &compress_rope}) {
      const float* p = m.upload(*table);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(std::vector<float>(p, p + table->size()), *table);
    }
  }
  EXPECT_EQ(FakeMirror::total, 2);  // a single mirror would have copied 20 times
  EXPECT_EQ(m.size(), 2);
}

TEST(KeyedMirrorsTest, ANewArrayBeyondCapacityTakesTheLeastRecentlyUsedCopy) {
  FakeMirror::total = 0;
  KeyedMirrors<FakeMirror, 2> m;
  const std::vector<float> a = {1.0f}, b = {2.0f}, c = {3.0f};
  const float* pa = m.upload(a);
  const float* pb = m.upload(b);
  EXPECT_EQ(m.upload(a), pa);  // a is now more recent than b
  const float* pc = m.upload(c);
  EXPECT_EQ(pc, pb);  // c took b's copy
  EXPECT_EQ(*pc, 3.0f);
  EXPECT_EQ(m.upload(a), pa);
  EXPECT_EQ(*m.upload(a), 1.0f);
  EXPECT_EQ(FakeMirror::total, 3);
  EXPECT_EQ(*m.upload(b), 2.0f);  // b again: takes c's copy (a was used last)
  EXPECT_EQ(FakeMirror::total, 4);
  EXPECT_EQ(*m.upload(a), 1.0f);
  EXPECT_EQ(m.size(), 2);
}

TEST(KeyedMirrorsTest, ContentsNotIdentityPickTheCopy) {
  FakeMirror::total = 0;
  KeyedMirrors<FakeMirror, 4> m;
  std::vector<float> v = {1.0f, 2.0f};
  const float* p = m.upload(v);
  const std::vector<float> same = {1.0f, 2.0f};
  EXPECT_EQ(m.upload(same), p);  // another vector with the same values
  v[1] = 3.0f;                   // the same vector with new values is a new array
  const float* q = m.upload(v);
  EXPECT_NE(q, p);
  EXPECT_EQ(q[1], 3.0f);
  EXPECT_EQ(p[1], 2.0f);  // the first copy still holds the old values
  EXPECT_EQ(m.upload(std::vector<float>{}), nullptr);
  EXPECT_EQ(FakeMirror::total, 2);
}

}  // namespace
}  // namespace dsinfer::cuda
