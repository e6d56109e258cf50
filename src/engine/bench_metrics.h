// Benchmark statistics: latency summaries (mean, P50, P90, P99) and length ranges ("128" or "128:1024").
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

}  // namespace dsinfer
