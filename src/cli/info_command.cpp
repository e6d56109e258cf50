// `dsinfer info`: version, build features and visible GPUs.
#include <cstdio>

#include "cli/commands.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#endif

namespace dsinfer::cli {

namespace {

int run_info() {
  std::printf("dsinfer 0.1.0\n");
#ifdef DSINFER_HAVE_CUDA
  std::printf("CUDA backend: compiled (sm_90a, sm_80)\n");
  std::string why;
  auto devices = cuda::query_devices(&why);
  if (devices.empty()) std::printf("GPUs: none (%s)\n", why.c_str());
  for (const auto& d : devices) {
    std::string path;
    try {
      path = std::string(cuda::arch_path_name(
                 cuda::choose_arch_path(d.major, d.minor, d.name, cuda::arch_request("")))) +
             " kernel path";
    } catch (const Error& e) {
      path = e.what();
    }
    std::printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB total, %.1f GiB free, %s, %s, PCI %s\n", d.index,
                d.name.c_str(), d.major, d.minor, d.multiprocessors, d.total_memory / 1073741824.0,
                d.free_memory / 1073741824.0, path.c_str(), d.uuid.c_str(), d.pci_bus_id.c_str());
  }
#else
  std::printf("CUDA backend: not compiled (no nvcc at build time)\n");
#endif
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* info = app.add_subcommand("info", "Version, build features and visible GPUs");
  info->callback([]() { run_guarded(run_info); });
}

}  // namespace dsinfer::cli
