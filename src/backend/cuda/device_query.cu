// Device discovery through the CUDA runtime.
#include <cuda_runtime.h>

#include "backend/cuda/device_query.h"
#include "backend/cuda/gpu_identity.h"

namespace dsinfer::cuda {

std::vector<DeviceInfo> query_devices(std::string* why_none) {
  std::vector<DeviceInfo> devices;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why_none) *why_none = cudaGetErrorString(err);
    cudaGetLastError();
    return devices;
  }
  int current = 0;  // the free-memory query selects each device: the caller's device is selected again after
  if (cudaGetDevice(&current) != cudaSuccess) current = 0;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.major = prop.major;
    info.minor = prop.minor;
    info.total_memory = prop.totalGlobalMem;
    info.multiprocessors = prop.multiProcessorCount;
    info.uuid = format_gpu_uuid(reinterpret_cast<const uint8_t*>(prop.uuid.bytes));
    info.pci_bus_id = format_pci_bus_id(prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      info.free_memory = free_b;
    }
    devices.push_back(info);
  }
  if (count > 0) cudaSetDevice(current);
  if (devices.empty() && why_none) *why_none = "no CUDA device visible";
  return devices;
}

std::string device_uuid(int index, std::string* why) {
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    cudaGetLastError();
    return "";
  }
  return format_gpu_uuid(reinterpret_cast<const uint8_t*>(prop.uuid.bytes));
}

}  // namespace dsinfer::cuda
