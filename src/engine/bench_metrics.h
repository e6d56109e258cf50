// Benchmark statistics: latency summaries (mean, P50, P90, P99), length ranges ("128" or "128:1024") and the
// batch-1 decode roofline.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace dsinfer {

struct LatencySummary {
  int64_t count = 0;
  double min = 0.0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
  nlohmann::json to_json() const;
};

// Percentile q in [0, 100] of `values` by linear interpolation between closest ranks (numpy's default);
// 0 for an empty list.
double percentile(std::vector<double> values, double q);
LatencySummary summarize(const std::vector<double>& values);

// A token length or a uniform range of lengths.
struct LengthRange {
  int32_t min = 0;
  int32_t max = 0;
  // Parses "N" or "A:B" (1 <= A <= B); throws dsinfer::Error naming `what`.
  static LengthRange parse(const std::string& text, const std::string& what);
  int32_t sample(std::mt19937_64& rng) const;
};

// The batch-1 decode roofline of a run: the weight bytes one single-token decode step reads over the device's
// measured copy bandwidth, and the run's mean time per output token against it.
struct DecodeRoofline {
  int64_t weight_bytes = 0;    // per decode token
  double copy_gbs = 0.0;       // measured in the same process
  double tpot_ms = 0.0;        // weight_bytes / copy_gbs
  double tpot_fraction = 0.0;  // tpot_ms / the run's mean TPOT (1: at the roofline); 0 without a TPOT
  nlohmann::json to_json() const;
};
// Throws dsinfer::Error unless weight_bytes > 0 and copy_gbs > 0.
DecodeRoofline decode_roofline(int64_t weight_bytes, double copy_gbs, double tpot_mean_ms);

}  // namespace dsinfer
