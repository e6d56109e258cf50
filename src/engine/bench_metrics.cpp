// Percentiles, latency summaries and length-range parsing for `dsinfer bench`.
#include "engine/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dsinfer {

nlohmann::json LatencySummary::to_json() const {
  return {{"count", count}, {"min", min}, {"mean", mean}, {"p50", p50},
          {"p90", p90},     {"p99", p99}, {"max", max}};
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

LatencySummary summarize(const std::vector<double>& values) {
  LatencySummary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

LengthRange LengthRange::parse(const std::string& text, const std::string& what) {
  auto number = [&](const std::string& s) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DSI_CHECK(used == s.size() && !s.empty() && v >= 1 && v <= (1 << 24), what,
              ": expected a length N or a range A:B", " of positive integers, got \"", text, "\"");
    return static_cast<int32_t>(v);
  };
  LengthRange r;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    r.min = r.max = number(text);
  } else {
    r.min = number(text.substr(0, colon));
    r.max = number(text.substr(colon + 1));
    DSI_CHECK(r.min <= r.max, what, ": range \"", text, "\" has its minimum above its maximum");
  }
  return r;
}

int32_t LengthRange::sample(std::mt19937_64& rng) const {
  if (min == max) return min;
  return std::uniform_int_distribution<int32_t>(min, max)(rng);
}

DecodeRoofline decode_roofline(int64_t weight_bytes, double copy_gbs, double tpot_mean_ms) {
  DSI_CHECK(weight_bytes > 0 && copy_gbs > 0.0, "decode roofline: ", weight_bytes, " bytes at ", copy_gbs,
            " GB/s");
  DecodeRoofline r;
  r.weight_bytes = weight_bytes;
  r.copy_gbs = copy_gbs;
  r.tpot_ms = static_cast<double>(weight_bytes) / (copy_gbs * 1e9) * 1e3;
  r.tpot_fraction = tpot_mean_ms > 0.0 ? r.tpot_ms / tpot_mean_ms : 0.0;
  return r;
}

nlohmann::json DecodeRoofline::to_json() const {
  return {{"decode_weight_bytes", weight_bytes},
          {"copy_bandwidth_gbs", copy_gbs},
          {"tpot_ms", tpot_ms},
          {"tpot_fraction", tpot_fraction}};
}

}  // namespace dsinfer
