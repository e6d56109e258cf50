// Prometheus text exposition (format 0.0.4) of a MetricsRegistry.
#include <charconv>
#include <cmath>
#include <string>

#include "server/metrics.h"

namespace dsinfer::server {

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];  // the shortest form that reads back as v (121.469, not 121.46899999999999)
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

Labels with(Labels labels, const std::string& key, const std::string& value) {
  labels.emplace_back(key, value);
  return labels;
}

}  // namespace

std::string MetricsRegistry::prometheus_text() const {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& c : collectors) c();
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    static const char* types[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name + " " + family.help + "\n";
    out += "# TYPE " + name + " " + types[static_cast<int>(family.kind)] + "\n";
    for (const auto& [key, s] : family.series) {
      if (s.counter) out += name + key + " " + number(s.counter->value()) + "\n";
      if (s.gauge) out += name + key + " " + number(s.gauge->value()) + "\n";
      if (s.histogram) {
        Histogram::Snapshot snap = s.histogram->snapshot();
        for (size_t i = 0; i < snap.cumulative.size(); ++i) {
          const std::string le = i < snap.bounds.size() ? number(snap.bounds[i]) : "+Inf";
          out += name + "_bucket" + render_labels(with(s.labels, "le", le)) + " " +
                 number(snap.cumulative[i]) + "\n";
        }
        out += name + "_sum" + key + " " + number(snap.sum) + "\n";
        out += name + "_count" + key + " " + number(static_cast<double>(snap.count)) + "\n";
      }
    }
  }
  return out;
}

}  // namespace dsinfer::server
