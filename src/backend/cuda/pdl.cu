// pdl_enabled(): whether kernels launched through launch_pdl (pdl.cuh) may overlap the previous kernel.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/pdl.cuh"

namespace dsinfer::cuda {

bool pdl_enabled() {
  static const bool supported = [] {
    const char* env = std::getenv("DSINFER_CUDA_PDL");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
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

}  // namespace dsinfer::cuda
