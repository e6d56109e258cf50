// GPU power sampling (gpu_power.h): the summary of a window, NVML loaded at run time, and the sampling
// thread.
#include "backend/cuda/gpu_power.h"

#include <dlfcn.h>

#include <algorithm>

namespace dsinfer::cuda {

nlohmann::json GpuPowerSummary::to_json() const {
  return {{"samples", samples},
          {"interval_ms", interval_ms},
          {"power_limit_w", power_limit_w},
          {"power_mean_w", power_mean_w},
          {"power_max_w", power_max_w},
          {"sm_clock_max_mhz", sm_clock_max_mhz},
          {"sm_clock_mean_mhz", sm_clock_mean_mhz},
          {"sm_clock_min_mhz", sm_clock_min_mhz},
          {"below_max_clock_fraction", below_max_clock_fraction},
          {"power_capped_fraction", power_capped_fraction},
          {"thermal_fraction", thermal_fraction},
          {"hw_slowdown_fraction", hw_slowdown_fraction},
          {"temperature_max_c", temperature_max_c}};
}

GpuPowerSummary summarize_gpu_power(const std::vector<GpuPowerSample>& samples, double interval_ms,
                                    double power_limit_w, int sm_clock_max_mhz) {
  GpuPowerSummary s;
  s.interval_ms = interval_ms;
  s.power_limit_w = power_limit_w;
  s.sm_clock_max_mhz = sm_clock_max_mhz;
  s.samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  double power = 0.0, clock = 0.0;
  int64_t below = 0, capped = 0, thermal = 0, slowdown = 0;
  s.sm_clock_min_mhz = samples.front().sm_clock_mhz;
  for (const GpuPowerSample& x : samples) {
    power += x.power_w;
    clock += x.sm_clock_mhz;
    s.power_max_w = std::max(s.power_max_w, x.power_w);
    s.sm_clock_min_mhz = std::min(s.sm_clock_min_mhz, x.sm_clock_mhz);
    s.temperature_max_c = std::max(s.temperature_max_c, x.temperature_c);
    if (sm_clock_max_mhz > 0 && x.sm_clock_mhz < sm_clock_max_mhz) ++below;
    if (x.reasons & kClockReasonSwPowerCap) ++capped;
    if (x.reasons & (kClockReasonSwThermal | kClockReasonHwThermal)) ++thermal;
    if (x.reasons & (kClockReasonHwSlowdown | kClockReasonHwPowerBrake)) ++slowdown;
  }
  const double n = static_cast<double>(samples.size());
  s.power_mean_w = power / n;
  s.sm_clock_mean_mhz = clock / n;
  s.below_max_clock_fraction = static_cast<double>(below) / n;
  s.power_capped_fraction = static_cast<double>(capped) / n;
  s.thermal_fraction = static_cast<double>(thermal) / n;
  s.hw_slowdown_fraction = static_cast<double>(slowdown) / n;
  return s;
}

namespace {

// The few NVML entry points used, declared here (the C ABI of nvml.h: nvmlReturn_t is an int, 0 success;
// a device is an opaque pointer).
using NvmlDevice = void*;
using InitFn = int (*)();
using ShutdownFn = int (*)();
using ByUuidFn = int (*)(const char*, NvmlDevice*);
using UintFn = int (*)(NvmlDevice, unsigned int*);              // power usage / enforced limit (mW)
using ClockFn = int (*)(NvmlDevice, int, unsigned int*);        // (max) clock of a clock type (MHz)
using TemperatureFn = int (*)(NvmlDevice, int, unsigned int*);  // temperature of a sensor (C)
using ReasonsFn = int (*)(NvmlDevice, unsigned long long*);     // clock-event reasons
constexpr int kNvmlClockSm = 1;                                 // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;                          // NVML_TEMPERATURE_GPU

class NvmlPowerSource : public GpuPowerSource {
 public:
  std::optional<GpuPowerSample> read() override {
    unsigned int mw = 0, mhz = 0, temperature = 0;
    unsigned long long reasons = 0;
    if (power_(device_, &mw) != 0 || clock_(device_, kNvmlClockSm, &mhz) != 0) return std::nullopt;
    GpuPowerSample s;
    s.power_w = mw / 1000.0;
    s.sm_clock_mhz = static_cast<int>(mhz);
    if (reasons_ != nullptr && reasons_(device_, &reasons) == 0) s.reasons = reasons;
    if (temperature_(device_, kNvmlTemperatureGpu, &temperature) == 0)
      s.temperature_c = static_cast<int>(temperature);
    return s;
  }
  double power_limit_w() const override { return limit_w_; }
  int sm_clock_max_mhz() const override { return max_mhz_; }
  ~NvmlPowerSource() override { shutdown_(); }

  static std::unique_ptr<GpuPowerSource> open(const std::string& uuid, std::string* why) {
    // The library stays loaded for the process (unloading under another NVML user is not worth the risk).
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *why = "libnvidia-ml.so.1 not found";
      return nullptr;
    }
    auto sym = [lib](const char* name) { return dlsym(lib, name); };
    auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    auto shutdown = reinterpret_cast<ShutdownFn>(sym("nvmlShutdown"));
    auto by_uuid = reinterpret_cast<ByUuidFn>(sym("nvmlDeviceGetHandleByUUID"));
    auto power = reinterpret_cast<UintFn>(sym("nvmlDeviceGetPowerUsage"));
    auto limit = reinterpret_cast<UintFn>(sym("nvmlDeviceGetEnforcedPowerLimit"));
    auto clock = reinterpret_cast<ClockFn>(sym("nvmlDeviceGetClockInfo"));
    auto max_clock = reinterpret_cast<ClockFn>(sym("nvmlDeviceGetMaxClockInfo"));
    auto temperature = reinterpret_cast<TemperatureFn>(sym("nvmlDeviceGetTemperature"));
    auto reasons = reinterpret_cast<ReasonsFn>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (reasons == nullptr)
      reasons = reinterpret_cast<ReasonsFn>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    if (!init || !shutdown || !by_uuid || !power || !limit || !clock || !max_clock || !temperature) {
      *why = "libnvidia-ml lacks an entry point it needs";
      return nullptr;
    }
    if (const int rc = init(); rc != 0) {
      *why = "nvmlInit failed (NVML error " + std::to_string(rc) + ")";
      return nullptr;
    }
    NvmlDevice device = nullptr;
    if (const int rc = by_uuid(uuid.c_str(), &device); rc != 0) {
      shutdown();
      *why = "NVML has no GPU " + uuid + " (NVML error " + std::to_string(rc) + ")";
      return nullptr;
    }
    std::unique_ptr<NvmlPowerSource> s(new NvmlPowerSource());
    s->device_ = device;
    s->shutdown_ = shutdown;
    s->power_ = power;
    s->clock_ = clock;
    s->temperature_ = temperature;
    s->reasons_ = reasons;
    unsigned int v = 0;
    if (limit(device, &v) == 0) s->limit_w_ = v / 1000.0;
    if (max_clock(device, kNvmlClockSm, &v) == 0) s->max_mhz_ = static_cast<int>(v);
    return s;
  }

 private:
  NvmlPowerSource() = default;
  NvmlDevice device_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  UintFn power_ = nullptr;
  ClockFn clock_ = nullptr;
  TemperatureFn temperature_ = nullptr;
  ReasonsFn reasons_ = nullptr;
  double limit_w_ = 0.0;
  int max_mhz_ = 0;
};

}  // namespace

std::unique_ptr<GpuPowerSource> open_nvml_power_source(const std::string& uuid, std::string* why) {
  return NvmlPowerSource::open(uuid, why);
}

GpuPowerMonitor::GpuPowerMonitor(std::unique_ptr<GpuPowerSource> source, std::chrono::milliseconds interval)
    : source_(std::move(source)), interval_(std::max(interval, std::chrono::milliseconds(1))) {}

GpuPowerMonitor::~GpuPowerMonitor() {
  if (thread_.joinable()) stop();
}

void GpuPowerMonitor::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    samples_.clear();
  }
  thread_ = std::thread([this] { run(); });
}

void GpuPowerMonitor::run() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const std::optional<GpuPowerSample> s = source_->read();  // outside the lock: NVML may take a while
    lock.lock();
    if (s) samples_.push_back(*s);
    next = std::max(next + interval_, std::chrono::steady_clock::now());  // a slow read: no burst after
    wake_.wait_until(lock, next, [this] { return stopping_; });
  }
}

GpuPowerSummary GpuPowerMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  return summarize_gpu_power(samples_, static_cast<double>(interval_.count()), source_->power_limit_w(),
                             source_->sm_clock_max_mhz());
}

}  // namespace dsinfer::cuda
