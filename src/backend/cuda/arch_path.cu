// Architecture dispatch (arch_path.h): compute capability -> kernel path, with the sm_80 override.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>

#include "backend/cuda/arch_path.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

// -1: not chosen yet; otherwise an ArchPath value.
std::atomic<int> g_path{-1};

}  // namespace

const char* arch_path_name(ArchPath path) {
  return path == ArchPath::kHopper ? "sm_90" : "sm_80";
}

ArchPath choose_arch_path(int major, int minor, const std::string& device, const std::string& request) {
  DSI_CHECK(major >= 8, "the CUDA backend needs compute capability 8.0 or newer, found ", major, ".", minor,
            " on ", device);
  if (request.empty() || request == "auto") {
    // sm_90a code runs on 9.x only; newer GPUs (10.x, 12.x) JIT the sm_80 PTX.
    return major == 9 ? ArchPath::kHopper : ArchPath::kAmpere;
  }
  if (request == "sm_80") return ArchPath::kAmpere;
  if (request == "sm_90") {
    DSI_CHECK(major == 9, "the Hopper path (sm_90) was requested but ", device, " has compute capability ",
              major, ".", minor, ": use sm_80 or auto");
    return ArchPath::kHopper;
  }
  fail("unknown CUDA architecture path \"", request, "\" (use auto, sm_90 or sm_80)");
}

std::string arch_request(const std::string& flag) {
  if (!flag.empty() && flag != "auto") return flag;
  const char* env = std::getenv("DSINFER_CUDA_ARCH");
  return env && *env ? std::string(env) : std::string("auto");
}

ArchPath init_arch_path(const std::string& flag) {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    fail("the CUDA backend cannot read the properties of the current CUDA device");
  }
  const ArchPath path = choose_arch_path(prop.major, prop.minor, prop.name, arch_request(flag));
  g_path.store(static_cast<int>(path));
  return path;
}

ArchPath arch_path() {
  const int p = g_path.load();
  return p < 0 ? init_arch_path() : static_cast<ArchPath>(p);
}

}  // namespace dsinfer::cuda
