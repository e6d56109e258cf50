// ProgressBar: a throttled, thread-safe terminal progress line on stderr (bar, percent, count, rate, ETA),
// plus the pure formatting helpers it is built from.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace dsinfer {

enum class ProgressUnit { kItems, kBytes };

// "1:05", "1:02:03" (hours), "--:--" when unknown (negative, NaN or infinite).
std::string format_duration(double seconds);
// kItems: "1234"; kBytes: "512 B", "1.5 KB", "12.3 MB", "1.50 GB" (powers of 1024).
std::string format_amount(int64_t amount, ProgressUnit unit);
// "12.3 it/s" / "45.6 MB/s"; "? it/s" when unknown.
std::string format_rate(double per_second, ProgressUnit unit);
// One progress line without terminal control codes, e.g.
// "load [##########----------]  50% 5/10 2.5 it/s ETA 0:02". A total <= 0 omits bar, percent and ETA.
std::string render_progress(const std::string& label, int64_t done, int64_t total, double elapsed_seconds,
                            ProgressUnit unit, int bar_width = 30);

// True when stderr is a terminal.
bool stderr_is_terminal();

class ProgressBar {
 public:
  // Disabled bars (the default when stderr is not a terminal) print nothing.
  ProgressBar(std::string label, int64_t total, bool enabled = stderr_is_terminal(),
              ProgressUnit unit = ProgressUnit::kItems);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Sets / adds to the amount done; redraws at most ~10 times per second. Safe from any thread.
  void update(int64_t done);
  void advance(int64_t n = 1);
  // Draws the final state and ends the line (once; the destructor calls it too).
  void finish();

  int64_t done() const;
  bool enabled() const { return enabled_; }

 private:
  void draw_locked(bool force);

  const std::string label_;
  const int64_t total_;
  const bool enabled_;
  const ProgressUnit unit_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace dsinfer
