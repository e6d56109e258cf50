// The GPU's power, SM clock and clock-event reasons sampled while a benchmark runs, so that a figure says
// whether the GPU held its clocks: the H200s of the device pool have a 700 W limit, and a sustained batch-1
// decode of an 8B model streams weights at ~4 TB/s and sits at that limit, where the power manager lowers
// the SM clock (docs/benchmarks.md, thirty-fifth session). Samples come from NVML, loaded at run time
// (libnvidia-ml ships with the driver; no NVML header or library is needed to build); without it the monitor
// is absent and says why. Pure host code (no CUDA headers); the summary and the sampling thread are
// unit-tested with a stand-in source (tests/unit/gpu_power_test.cpp).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dsinfer::cuda {

// NVML's clock-event reason bits (nvmlClocksEventReason*).
inline constexpr uint64_t kClockReasonGpuIdle = 0x1;
inline constexpr uint64_t kClockReasonSwPowerCap = 0x4;
inline constexpr uint64_t kClockReasonHwSlowdown = 0x8;
inline constexpr uint64_t kClockReasonSwThermal = 0x20;
inline constexpr uint64_t kClockReasonHwThermal = 0x40;
inline constexpr uint64_t kClockReasonHwPowerBrake = 0x80;

struct GpuPowerSample {
  double power_w = 0.0;   // NVML's power reading (on Hopper an average over the last second)
  int sm_clock_mhz = 0;   // the SM clock now
  uint64_t reasons = 0;   // clock-event reason bits now
  int temperature_c = 0;  // GPU core
};

// What a sampled window saw. Fractions are of the samples.
struct GpuPowerSummary {
  int64_t samples = 0;
  double interval_ms = 0.0;
  double power_limit_w = 0.0;  // the enforced limit (0: unknown)
  double power_mean_w = 0.0;
  double power_max_w = 0.0;
  int sm_clock_max_mhz = 0;  // the GPU's maximum SM clock (0: unknown)
  double sm_clock_mean_mhz = 0.0;
  int sm_clock_min_mhz = 0;
  double below_max_clock_fraction = 0.0;  // SM clock under sm_clock_max_mhz (when known)
  double power_capped_fraction = 0.0;     // kClockReasonSwPowerCap set
  double thermal_fraction = 0.0;          // a thermal reason set
  double hw_slowdown_fraction = 0.0;      // hardware slowdown or power brake set
  int temperature_max_c = 0;

  nlohmann::json to_json() const;
};

// The summary of `samples` (an empty list gives samples = 0 and zeros). Limits as the device reports them.
GpuPowerSummary summarize_gpu_power(const std::vector<GpuPowerSample>& samples, double interval_ms,
                                    double power_limit_w, int sm_clock_max_mhz);

// Where samples come from: read() gives one sample, or nothing when this reading failed (skipped).
class GpuPowerSource {
 public:
  virtual ~GpuPowerSource() = default;
  virtual std::optional<GpuPowerSample> read() = 0;
  virtual double power_limit_w() const = 0;
  virtual int sm_clock_max_mhz() const = 0;
};

// NVML for the GPU with this UUID ("GPU-..." as nvidia-smi prints it), or null with *why set (no driver
// library, NVML failing to start, no GPU with that UUID).
std::unique_ptr<GpuPowerSource> open_nvml_power_source(const std::string& uuid, std::string* why);

// Samples a source every interval on its own thread between start() and stop(). stop() wakes the thread,
// joins it and summarises; the destructor stops a running monitor.
class GpuPowerMonitor {
 public:
  GpuPowerMonitor(std::unique_ptr<GpuPowerSource> source, std::chrono::milliseconds interval);
  ~GpuPowerMonitor();
  GpuPowerMonitor(const GpuPowerMonitor&) = delete;
  GpuPowerMonitor& operator=(const GpuPowerMonitor&) = delete;

  void start();  // a first sample at once, then one every interval
  GpuPowerSummary stop();

 private:
  void run();

  std::unique_ptr<GpuPowerSource> source_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<GpuPowerSample> samples_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace dsinfer::cuda
