// The GPU's UUID and PCI bus id as records spell them (backend/cuda/gpu_identity.h): nvidia-smi's forms,
// checked against values nvidia-smi printed on the H200 machines.
#include "backend/cuda/gpu_identity.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dsinfer {
namespace {

TEST(GpuIdentityTest, UuidInNvidiaSmiForm) {
  const uint8_t bytes[16] = {0x06, 0x5f, 0x42, 0x47, 0xa5, 0x30, 0x44, 0x46,
                             0x88, 0x2c, 0x6c, 0x82, 0x8f, 0xe7, 0xfb, 0x44};
  EXPECT_EQ(cuda::format_gpu_uuid(bytes), "GPU-065f4247-a530-4446-882c-6c828fe7fb44");
  const uint8_t zeros[16] = {};
  EXPECT_EQ(cuda::format_gpu_uuid(zeros), "GPU-00000000-0000-0000-0000-000000000000");
  uint8_t ff[16];
  for (uint8_t& b : ff) b = 0xff;
  EXPECT_EQ(cuda::format_gpu_uuid(ff), "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
}

TEST(GpuIdentityTest, PciBusIdInNvidiaSmiForm) {
  EXPECT_EQ(cuda::format_pci_bus_id(0, 0, 6), "00000000:00:06.0");
  EXPECT_EQ(cuda::format_pci_bus_id(1, 0xc1, 0x1f), "00000001:C1:1F.0");
}

}  // namespace
}  // namespace dsinfer
