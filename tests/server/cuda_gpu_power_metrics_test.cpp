// The dsinfer_gpu_* gauges of `dsinfer serve` (server/gpu_power_metrics.h), fed by a stand-in power source:
// values at each scrape, the power-cap and thermal flags from the clock-event reasons, a failed reading
// counted with the last values kept; the UUID of the engine's GPU; and, where a GPU is visible, registered
// from NVML (CI skips that one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/backend_factory.h"
#include "backend/cuda/device_query.h"
#include "model/model_config.h"
#include "server/gpu_power_metrics.h"
#endif

namespace dsinfer {
namespace {

using ::testing::HasSubstr;

#ifdef DSINFER_HAVE_CUDA

// Plays back readings (nullopt: a failed one), then repeats the last.
class Playback : public cuda::GpuPowerSource {
 public:
  explicit Playback(std::vector<std::optional<cuda::GpuPowerSample>> readings)
      : readings_(std::move(readings)) {}
  std::optional<cuda::GpuPowerSample> read() override {
    const std::optional<cuda::GpuPowerSample> r = readings_[std::min(next_, readings_.size() - 1)];
    ++next_;
    return r;
  }
  double power_limit_w() const override { return 700.0; }
  int sm_clock_max_mhz() const override { return 1980; }

 private:
  std::vector<std::optional<cuda::GpuPowerSample>> readings_;
  size_t next_ = 0;
};

TEST(GpuPowerMetricsTest, GaugesFollowEachScrape) {
  server::MetricsRegistry registry;
  const server::Labels gpu = {{"gpu", "GPU-test"}};
  server::register_gpu_power_metrics(
      registry,
      std::make_shared<Playback>(std::vector<std::optional<cuda::GpuPowerSample>>{
          cuda::GpuPowerSample{640.1, 1980, 0, 39},
          cuda::GpuPowerSample{699.0, 1890, cuda::kClockReasonSwPowerCap, 41}, std::nullopt,
          cuda::GpuPowerSample{300.0, 1965, cuda::kClockReasonHwThermal, 85}}),
      "GPU-test");
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_limit_watts", gpu), 700.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_sm_clock_max_mhz", gpu), 1980.0);

  std::string text = registry.prometheus_text();
  EXPECT_NE(text.find("dsinfer_gpu_power_watts{gpu=\"GPU-test\"} 640.1\n"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_sm_clock_mhz", gpu), 1980.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_capped", gpu), 0.0);

  registry.prometheus_text();
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_watts", gpu), 699.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_sm_clock_mhz", gpu), 1890.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_capped", gpu), 1.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_temperature_celsius", gpu), 41.0);

  registry.prometheus_text();  // the failed reading: last values kept, counted
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_watts", gpu), 699.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_metrics_read_errors_total", gpu), 1.0);

  registry.prometheus_text();
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_power_capped", gpu), 0.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_thermal_slowdown", gpu), 1.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_temperature_celsius", gpu), 85.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_metrics_read_errors_total", gpu), 1.0);
}

TEST(GpuPowerMetricsTest, CpuDeviceRegistersNothing) {
  server::MetricsRegistry registry;
  EXPECT_FALSE(server::register_visible_gpu_power_metrics(registry, "cpu").empty());
  EXPECT_EQ(registry.prometheus_text().find("dsinfer_gpu_power_watts"), std::string::npos);
}

// --device auto follows the backend's own choice (picks_cuda): every architecture has CUDA kernels, so with a
// GPU visible the gauges are registered for a model directory, and without one auto runs on the CPU and
// registers nothing; an unreadable model directory registers nothing either.
TEST(GpuPowerMetricsTest, AutoWithAModelFollowsTheBackendChoice) {
  server::MetricsRegistry registry;
  const std::string v4 = std::string(DSINFER_TEST_DATA) + "/models/tiny-deepseek-v4";
  const bool gpu = picks_cuda("auto", load_model_config(v4));
  const std::string why = server::register_visible_gpu_power_metrics(registry, "auto", v4);
  if (gpu) {
    // Registered, unless NVML itself is missing (then the reason says so, not "on the CPU").
    EXPECT_EQ(why.find("runs this model on the CPU"), std::string::npos) << why;
    EXPECT_EQ(registry.prometheus_text().find("dsinfer_gpu_power_watts") != std::string::npos, why.empty())
        << why;
  } else {
    EXPECT_THAT(why, HasSubstr("runs this model on the CPU"));
    EXPECT_EQ(registry.prometheus_text().find("dsinfer_gpu_power_watts"), std::string::npos);
  }
  server::MetricsRegistry unreadable;
  EXPECT_FALSE(
      server::register_visible_gpu_power_metrics(unreadable, "auto", "/nonexistent/dsinfer").empty());
  EXPECT_EQ(unreadable.prometheus_text().find("dsinfer_gpu_power_watts"), std::string::npos);
}

TEST(GpuPowerMetricsTest, DeviceUuidIsTheOneQueryDevicesNames) {
  const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
  std::string why;
  const std::string uuid = cuda::device_uuid(0, &why);
  if (gpus.empty()) {
    EXPECT_TRUE(uuid.empty());
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_EQ(uuid, gpus[0].uuid);
  }
}

TEST(GpuPowerMetricsTest, VisibleGpuIsSampledFromNvml) {
  const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device";
  server::MetricsRegistry registry;
  const std::string why = server::register_visible_gpu_power_metrics(registry, "auto");
  ASSERT_TRUE(why.empty()) << why;
  registry.prometheus_text();
  const server::Labels gpu = {{"gpu", gpus[0].uuid}};
  EXPECT_GT(registry.value("dsinfer_gpu_power_watts", gpu), 0.0);
  EXPECT_GT(registry.value("dsinfer_gpu_power_limit_watts", gpu), 0.0);
  EXPECT_GT(registry.value("dsinfer_gpu_sm_clock_mhz", gpu), 0.0);
  EXPECT_DOUBLE_EQ(registry.value("dsinfer_gpu_metrics_read_errors_total", gpu), 0.0);
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
