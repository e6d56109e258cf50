// The GPU's power and clock gauges of `dsinfer serve` (names are a public contract), read from NVML at every
// scrape: a decode that streams weights at full bandwidth can sit at the GPU's power limit, where the power
// manager lowers the SM clock and every step slows (docs/benchmarks.md, thirty-fifth session), so an
// operator can alert on dsinfer_gpu_power_capped or on the SM clock. Only in builds with the CUDA backend.
#pragma once
#include <memory>
#include <string>

#include "server/metrics.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/gpu_power.h"

namespace dsinfer::server {

// Registers the dsinfer_gpu_* gauges, labelled gpu="<uuid>", refreshed from `source` at every scrape (a
// failed reading keeps the last values and counts dsinfer_gpu_metrics_read_errors_total).
void register_gpu_power_metrics(MetricsRegistry& registry, std::shared_ptr<cuda::GpuPowerSource> source,
                                const std::string& uuid);

// The same for the first visible GPU (the engine's) through NVML, unless `device` is "cpu", or "auto" with a
// model (config.json in model_dir) that --device auto runs on the CPU. Returns why nothing was registered
// ("" when registered).
std::string register_visible_gpu_power_metrics(MetricsRegistry& registry, const std::string& device,
                                               const std::string& model_dir = "");

}  // namespace dsinfer::server
#endif
