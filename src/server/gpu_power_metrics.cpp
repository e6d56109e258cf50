// The dsinfer_gpu_* power and clock gauges (gpu_power_metrics.h).
#include "server/gpu_power_metrics.h"

#ifdef DSINFER_HAVE_CUDA
#include <mutex>

#include "backend/backend_factory.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "model/model_config.h"

namespace dsinfer::server {

void register_gpu_power_metrics(MetricsRegistry& registry, std::shared_ptr<cuda::GpuPowerSource> source,
                                const std::string& uuid) {
  const Labels gpu = {{"gpu", uuid}};
  Gauge& power =
      registry.gauge("dsinfer_gpu_power_watts", "GPU power draw (NVML; on Hopper a 1 s average)", gpu);
  Gauge& limit = registry.gauge("dsinfer_gpu_power_limit_watts", "Enforced GPU power limit", gpu);
  Gauge& clock = registry.gauge("dsinfer_gpu_sm_clock_mhz", "GPU SM clock now", gpu);
  Gauge& clock_max = registry.gauge("dsinfer_gpu_sm_clock_max_mhz", "GPU maximum SM clock", gpu);
  Gauge& capped =
      registry.gauge("dsinfer_gpu_power_capped",
                     "1 while the power limit holds the GPU's clocks down (software power cap)", gpu);
  Gauge& thermal =
      registry.gauge("dsinfer_gpu_thermal_slowdown", "1 while a thermal limit slows the GPU", gpu);
  Gauge& temperature = registry.gauge("dsinfer_gpu_temperature_celsius", "GPU core temperature", gpu);
  Counter& errors =
      registry.counter("dsinfer_gpu_metrics_read_errors_total",
                       "GPU power/clock readings that failed (the gauges keep their last values)", gpu);
  limit.set(source->power_limit_w());
  clock_max.set(source->sm_clock_max_mhz());
  auto mu = std::make_shared<std::mutex>();  // scrapes may run collectors concurrently
  registry.add_collector([=, &power, &clock, &capped, &thermal, &temperature, &errors]() {
    std::lock_guard<std::mutex> lock(*mu);
    const std::optional<cuda::GpuPowerSample> s = source->read();
    if (!s) {
      errors.inc();
      return;
    }
    power.set(s->power_w);
    clock.set(s->sm_clock_mhz);
    capped.set((s->reasons & cuda::kClockReasonSwPowerCap) ? 1.0 : 0.0);
    thermal.set((s->reasons & (cuda::kClockReasonSwThermal | cuda::kClockReasonHwThermal)) ? 1.0 : 0.0);
    temperature.set(s->temperature_c);
  });
}

std::string register_visible_gpu_power_metrics(MetricsRegistry& registry, const std::string& device,
                                               const std::string& model_dir) {
  if (device == "cpu") return "the CPU backend was asked for";
  if (device == "auto" && !model_dir.empty()) {
    // make_backend's own rule (picks_cuda): --device auto runs a model on the CPU when no GPU is visible or
    // the GPU has no kernels for its architecture; then the gauges would describe a GPU the engine does not
    // use.
    try {
      if (!picks_cuda(device, load_model_config(model_dir)))
        return "--device auto runs this model on the CPU (no GPU, or no CUDA kernels for its architecture)";
    } catch (const Error& e) {
      return e.what();
    }
  }
  std::string why;
  const std::string uuid = cuda::device_uuid(0, &why);  // the engine's GPU; no context made here
  if (uuid.empty()) return why.empty() ? "no CUDA device" : why;
  std::unique_ptr<cuda::GpuPowerSource> source = cuda::open_nvml_power_source(uuid, &why);
  if (!source) return why;
  register_gpu_power_metrics(registry, std::move(source), uuid);
  return "";
}

}  // namespace dsinfer::server
#endif
