// MetricsRegistry and Histogram: series storage and lookup.
#include "server/metrics.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  DSI_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must be ascending");
}

void Histogram::observe(double v) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  return out + "}";
}

MetricsRegistry::Series& MetricsRegistry::series(const std::string& name, const std::string& help, Kind kind,
                                                 const Labels& labels) {
  auto [it, inserted] = families_.try_emplace(name, Family{kind, help, {}});
  DSI_CHECK(it->second.kind == kind, "metric ", name, " is already registered with another type");
  Series& s = it->second.series[render_labels(labels)];
  s.labels = labels;
  return s;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kCounter, labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kGauge, labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kHistogram, labels);
  if (!s.histogram) s.histogram = std::make_unique<Histogram>(bounds);
  return *s.histogram;
}

void MetricsRegistry::add_collector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

const MetricsRegistry::Series* MetricsRegistry::find(const std::string& name, const Labels& labels) const {
  auto f = families_.find(name);
  if (f == families_.end()) return nullptr;
  auto s = f->second.series.find(render_labels(labels));
  return s == f->second.series.end() ? nullptr : &s->second;
}

double MetricsRegistry::value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Series* s = find(name, labels);
  if (!s) return 0.0;
  if (s->counter) return s->counter->value();
  if (s->gauge) return s->gauge->value();
  return 0.0;
}

Histogram::Snapshot MetricsRegistry::histogram_snapshot(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Series* s = find(name, labels);
  return s && s->histogram ? s->histogram->snapshot() : Histogram::Snapshot{};
}

}  // namespace dsinfer::server
