// Device discovery for the CUDA backend: lists GPUs and their compute capability.
#pragma once
#include <string>
#include <vector>

namespace dsinfer::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  size_t total_memory = 0;
  size_t free_memory = 0;
  int multiprocessors = 0;
  std::string uuid;        // "GPU-..." as nvidia-smi prints it (gpu_identity.h)
  std::string pci_bus_id;  // "00000000:00:06.0" as nvidia-smi prints it
};

// Returns the visible CUDA devices; empty (never throws) when there is no driver or no GPU.
std::vector<DeviceInfo> query_devices(std::string* why_none = nullptr);

// The UUID of device `index` ("GPU-..."), from its properties only: unlike query_devices (whose free-memory
// query makes a context on every GPU), it touches no device. "" with *why set when there is none.
std::string device_uuid(int index, std::string* why = nullptr);

}  // namespace dsinfer::cuda
