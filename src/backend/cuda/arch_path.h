// Architecture dispatch by compute capability: which kernel path (Hopper sm_90 or Ampere sm_80/86/89) the
// CUDA backend runs, chosen once from the device when the backend starts. The Ampere path uses no
// wgmma/TMA, so it also runs on Hopper: DSINFER_CUDA_ARCH=sm_80 (or the CLI's --cuda-arch sm_80) forces it
// there for testing. Kernels read arch_path() to pick a variant. Header without CUDA types: usable from
// .cpp and .cu files alike; implemented in arch_path.cu (dsinfer_cuda).
#pragma once
#include <string>

namespace dsinfer::cuda {

enum class ArchPath {
  kHopper,  // sm_90 (the sm_90a cubin): Hopper-only variants (wgmma, TMA) where a kernel has one
  kAmpere,  // sm_80 (the sm_80 cubin, or its PTX on newer GPUs): no Hopper-only instructions
};

// "sm_90" or "sm_80".
const char* arch_path_name(ArchPath path);

// The path for a device of compute capability major.minor named `device` given a request: "" or "auto"
// (from the capability), "sm_80" (the Ampere path; any GPU of capability >= 8.0) or "sm_90" (only on a
// capability 9.x GPU). Throws dsinfer::Error below 8.0 ("needs compute capability 8.0 or newer, found
// X.Y on <name>"), for sm_90 on another GPU and for an unknown request. Pure: no CUDA calls.
ArchPath choose_arch_path(int major, int minor, const std::string& device, const std::string& request);

// The request in effect: `flag` when it is neither empty nor "auto", else $DSINFER_CUDA_ARCH, else "auto".
std::string arch_request(const std::string& flag);

// Chooses the path for the current CUDA device from arch_request(flag) and makes it the one arch_path()
// returns. Called when the CUDA backend starts; a later call re-chooses (tests).
ArchPath init_arch_path(const std::string& flag = "");

// The chosen path; initialises it from the device and $DSINFER_CUDA_ARCH on first use if nothing has.
ArchPath arch_path();

}  // namespace dsinfer::cuda
