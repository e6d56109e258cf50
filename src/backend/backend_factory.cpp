// Backend selection by device name.
#include "backend/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/log.h"

namespace dsinfer {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu" || device == "auto") {
    // The CUDA backend's model ops arrive with the "CUDA backend I" work; until then auto means cpu.
    return std::make_unique<CpuBackend>();
  }
  if (device == "cuda") {
    fail("--device cuda: the CUDA backend's model ops are not available in this build yet; use --device cpu");
  }
  fail("unknown --device \"", device, "\" (use auto, cpu or cuda)");
}

}  // namespace dsinfer
