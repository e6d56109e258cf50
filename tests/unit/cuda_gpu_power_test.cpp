// GPU power sampling (backend/cuda/gpu_power.h): the summary of a window and the sampling thread, fed by a
// stand-in source (no GPU needed); NVML for a GPU that does not exist is refused with a reason; where a GPU
// is visible, NVML samples it (CI compiles that test and skips it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/device_query.h"
#include "backend/cuda/gpu_power.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda::GpuPowerSample;

TEST(GpuPowerTest, SummaryOfAWindow) {
  const std::vector<GpuPowerSample> samples = {
      GpuPowerSample{690.0, 1980, 0, 38},
      GpuPowerSample{700.0, 1890, cuda::kClockReasonSwPowerCap, 40},
      GpuPowerSample{698.0, 1605, cuda::kClockReasonSwPowerCap | cuda::kClockReasonHwThermal, 41},
      GpuPowerSample{512.0, 1980, cuda::kClockReasonHwPowerBrake, 39},
  };
  const cuda::GpuPowerSummary s = cuda::summarize_gpu_power(samples, 100.0, 700.0, 1980);
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.interval_ms, 100.0);
  EXPECT_DOUBLE_EQ(s.power_limit_w, 700.0);
  EXPECT_DOUBLE_EQ(s.power_mean_w, (690.0 + 700.0 + 698.0 + 512.0) / 4);
  EXPECT_DOUBLE_EQ(s.power_max_w, 700.0);
  EXPECT_DOUBLE_EQ(s.sm_clock_mean_mhz, (1980.0 + 1890.0 + 1605.0 + 1980.0) / 4);
  EXPECT_EQ(s.sm_clock_min_mhz, 1605);
  EXPECT_EQ(s.sm_clock_max_mhz, 1980);
  EXPECT_DOUBLE_EQ(s.below_max_clock_fraction, 0.5);
  EXPECT_DOUBLE_EQ(s.power_capped_fraction, 0.5);
  EXPECT_DOUBLE_EQ(s.thermal_fraction, 0.25);
  EXPECT_DOUBLE_EQ(s.hw_slowdown_fraction, 0.25);
  EXPECT_EQ(s.temperature_max_c, 41);
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j["samples"], 4);
  EXPECT_DOUBLE_EQ(j["power_capped_fraction"].get<double>(), 0.5);
  EXPECT_EQ(j["sm_clock_min_mhz"], 1605);
}

TEST(GpuPowerTest, UnknownMaximumClockCountsNothingBelowIt) {
  const cuda::GpuPowerSummary s =
      cuda::summarize_gpu_power({GpuPowerSample{100.0, 345, 0, 30}}, 50.0, 0.0, 0);
  EXPECT_EQ(s.samples, 1);
  EXPECT_DOUBLE_EQ(s.below_max_clock_fraction, 0.0);
  EXPECT_EQ(s.sm_clock_min_mhz, 345);
}

TEST(GpuPowerTest, EmptyWindowIsAllZero) {
  const cuda::GpuPowerSummary s = cuda::summarize_gpu_power({}, 100.0, 700.0, 1980);
  EXPECT_EQ(s.samples, 0);
  EXPECT_DOUBLE_EQ(s.power_mean_w, 0.0);
  EXPECT_DOUBLE_EQ(s.sm_clock_mean_mhz, 0.0);
  EXPECT_EQ(s.sm_clock_min_mhz, 0);
  EXPECT_DOUBLE_EQ(s.power_limit_w, 700.0);
}

// Every odd read fails (skipped); even reads give 600 + the read's index watts.
class StandInSource : public cuda::GpuPowerSource {
 public:
  explicit StandInSource(std::atomic<int>* reads) : reads_(reads) {}
  std::optional<GpuPowerSample> read() override {
    const int i = reads_->fetch_add(1);
    if (i % 2 == 1) return std::nullopt;
    return GpuPowerSample{600.0 + i, 1980 - i, i == 0 ? cuda::kClockReasonSwPowerCap : 0, 40};
  }
  double power_limit_w() const override { return 700.0; }
  int sm_clock_max_mhz() const override { return 1980; }

 private:
  std::atomic<int>* reads_;
};

TEST(GpuPowerTest, MonitorSamplesUntilStoppedAndSkipsFailedReads) {
  std::atomic<int> reads{0};
  cuda::GpuPowerMonitor monitor(std::make_unique<StandInSource>(&reads), std::chrono::milliseconds(1));
  monitor.start();
  while (reads.load() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const cuda::GpuPowerSummary s = monitor.stop();
  const int n = reads.load();  // no read after stop() returned
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(reads.load(), n);
  EXPECT_EQ(s.samples, (n + 1) / 2);  // the even reads
  EXPECT_GE(s.samples, 3);
  EXPECT_DOUBLE_EQ(s.power_max_w, 600.0 + 2 * ((n - 1) / 2));
  EXPECT_EQ(s.sm_clock_min_mhz, 1980 - 2 * ((n - 1) / 2));
  EXPECT_DOUBLE_EQ(s.power_capped_fraction, 1.0 / static_cast<double>(s.samples));
  EXPECT_DOUBLE_EQ(s.power_limit_w, 700.0);
}

TEST(GpuPowerTest, StopWakesALongIntervalAndASecondStartBeginsAfresh) {
  std::atomic<int> reads{0};
  cuda::GpuPowerMonitor monitor(std::make_unique<StandInSource>(&reads), std::chrono::hours(1));
  monitor.start();  // one read at once, then an hour's wait that stop() must cut short
  while (reads.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(monitor.stop().samples, 1);
  EXPECT_EQ(monitor.stop().samples, 1);  // stopping again keeps the window
  reads = 2;
  monitor.start();
  while (reads.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const cuda::GpuPowerSummary s = monitor.stop();
  EXPECT_EQ(s.samples, 1);
  EXPECT_DOUBLE_EQ(s.power_mean_w, 602.0);
}

TEST(GpuPowerTest, DestructorStopsARunningMonitor) {
  std::atomic<int> reads{0};
  {
    cuda::GpuPowerMonitor monitor(std::make_unique<StandInSource>(&reads), std::chrono::hours(1));
    monitor.start();
  }
  SUCCEED();
}

TEST(GpuPowerTest, NvmlRefusesAGpuThatDoesNotExist) {
  std::string why;
  EXPECT_EQ(cuda::open_nvml_power_source("GPU-00000000-0000-0000-0000-000000000000", &why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(GpuPowerTest, NvmlSamplesTheVisibleGpu) {
  const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device";
  std::string why;
  std::unique_ptr<cuda::GpuPowerSource> source = cuda::open_nvml_power_source(gpus[0].uuid, &why);
  ASSERT_NE(source, nullptr) << why;
  EXPECT_GT(source->power_limit_w(), 0.0);
  EXPECT_GT(source->sm_clock_max_mhz(), 0);
  cuda::GpuPowerMonitor monitor(std::move(source), std::chrono::milliseconds(10));
  monitor.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const cuda::GpuPowerSummary s = monitor.stop();
  ASSERT_GE(s.samples, 1);
  EXPECT_GT(s.power_mean_w, 0.0);
  EXPECT_LE(s.power_mean_w, 2.0 * s.power_limit_w);
  EXPECT_GT(s.sm_clock_mean_mhz, 0.0);
  EXPECT_LE(s.sm_clock_mean_mhz, s.sm_clock_max_mhz);
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
