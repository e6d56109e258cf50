// A small thread-safe metrics registry (counters, gauges, histograms with label sets) that the server
// exposes in the Prometheus text format and that benchmarks can read directly.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending (+Inf is implicit)
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, last = above every bound
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class MetricsRegistry {
 public:
  // Returns the metric of `name` with `labels`, creating the family/series on first use. A name keeps the
  // type and help it was first registered with (registering it with another type throws dsinfer::Error).
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                       const Labels& labels = {});

  // Collectors run before every exposition (e.g. to refresh gauges from engine stats).
  void add_collector(std::function<void()> collector);

  // Prometheus text exposition format 0.0.4 (families sorted by name).
  std::string prometheus_text() const;

  // Value of a counter or gauge series (0 when absent): for tests and benchmarks.
  double value(const std::string& name, const Labels& labels = {}) const;
  // A histogram's snapshot (empty when absent).
  Histogram::Snapshot histogram_snapshot(const std::string& name, const Labels& labels = {}) const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::map<std::string, Series> series;  // key: rendered label set
  };
  Series& series(const std::string& name, const std::string& help, Kind kind, const Labels& labels);
  const Series* find(const std::string& name, const Labels& labels) const;

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void()>> collectors_;
};

// Label set as Prometheus writes it: {a="x",b="y"} (escaped), "" when empty.
std::string render_labels(const Labels& labels);

}  // namespace dsinfer::server
