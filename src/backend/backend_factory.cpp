// Backend selection by device name.
#include "backend/backend_factory.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model_config.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {

namespace {

#ifdef DSINFER_HAVE_CUDA
// DSINFER_CUDA_GEMM=bf16 rounds GEMM activations to bf16 (one GEMM) instead of the hi/lo split.
std::unique_ptr<Backend> make_cuda_backend() {
  CudaBackendOptions options;
  const char* gemm = std::getenv("DSINFER_CUDA_GEMM");
  if (gemm && std::strcmp(gemm, "bf16") == 0) options.split_gemm_activations = false;
  return std::make_unique<CudaBackend>(options);
}
#endif

}  // namespace

bool cuda_runs(const ModelConfig& config) {
  return config.arch == Arch::kLlama || config.arch == Arch::kQwen2 || config.arch == Arch::kDeepseekV2 ||
         config.arch == Arch::kDeepseekV3;
}

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& model_dir) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (device == "auto") {
#ifdef DSINFER_HAVE_CUDA
    // The GPU when there is one and it has kernels for this architecture; otherwise the CPU reference.
    if (cuda::device_available()) {
      if (model_dir.empty() || cuda_runs(load_model_config(model_dir))) return make_cuda_backend();
      log_info("--device auto: no CUDA kernels for this architecture yet, running on the CPU");
    }
#endif
    return std::make_unique<CpuBackend>();
  }
  if (device == "cuda") {
#ifdef DSINFER_HAVE_CUDA
    DSI_CHECK(cuda::device_available(), "--device cuda: no CUDA device is visible");
    return make_cuda_backend();
#else
    fail("--device cuda: this build has no CUDA backend (no CUDA compiler was found); use --device cpu");
#endif
  }
  fail("unknown --device \"", device, "\" (use auto, cpu or cuda)");
}

}  // namespace dsinfer
