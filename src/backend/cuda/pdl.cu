// pdl_enabled(): whether kernels launched through launch_pdl (pdl.cuh) may overlap the previous kernel;
// prefer_shared_carveout(): the L1 / shared memory split those kernels ask for.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_carveout.h"
#include "core/env_choice.h"

namespace dsinfer::cuda {

bool pdl_enabled() {
  static const bool supported = [] {
    if (!env_switch("DSINFER_CUDA_PDL", true)) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return supported && arch_path() == ArchPath::kHopper;  // the forced Ampere path runs without it
}

void prefer_shared_carveout(const void* kernel) {
  static const int carveout = parse_smem_carveout(std::getenv("DSINFER_CUDA_SMEM_CARVEOUT"));
  if (carveout == kSmemCarveoutDriver) return;
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert(kernel).second) return;
  // A hint: a device or kernel that cannot take it keeps the driver's choice.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout) != cudaSuccess)
    cudaGetLastError();
}

}  // namespace dsinfer::cuda
