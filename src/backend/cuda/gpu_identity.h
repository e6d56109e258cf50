// How a GPU is named in records: its UUID and PCI bus id in nvidia-smi's spelling, so that a benchmark's JSON
// and `dsinfer info` can be matched with `nvidia-smi --query-gpu=uuid,pci.bus_id` (machines lent from a pool
// may be a different GPU on every start, and two H200s can differ by a few percent on the same kernels).
// Pure host code (no CUDA headers), unit-tested without a GPU (tests/unit/gpu_identity_test.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsinfer::cuda {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex) of the 16 bytes of cudaDeviceProp::uuid.
inline std::string format_gpu_uuid(const uint8_t* bytes) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(bytes[i]));
    out += hex;
  }
  return out;
}

// "DDDDDDDD:BB:DD.0" (upper-case hex, nvidia-smi's pci.bus_id) of cudaDeviceProp's domain, bus and device
// ids.
inline std::string format_pci_bus_id(int domain, int bus, int device) {
  char id[32];
  std::snprintf(id, sizeof id, "%08X:%02X:%02X.0", static_cast<unsigned>(domain) & 0xffffffffu,
                static_cast<unsigned>(bus) & 0xffu, static_cast<unsigned>(device) & 0xffu);
  return id;
}

}  // namespace dsinfer::cuda
