// ProgressBar implementation and formatting helpers.
#include "core/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dsinfer {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

std::string printf_string(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Scales bytes to B/KB/MB/GB/TB (powers of 1024) with about three significant digits.
std::string format_bytes(double bytes, const char* suffix) {
  static constexpr const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  std::string number = unit == 0
                           ? printf_string("%.0f", bytes)
                           : printf_string(bytes < 10.0 ? "%.2f" : (bytes < 100.0 ? "%.1f" : "%.0f"), bytes);
  number.append(" ").append(kUnits[unit]).append(suffix);
  return number;
}

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[48];
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(m), static_cast<long long>(s));
  }
  return buf;
}

std::string format_amount(int64_t amount, ProgressUnit unit) {
  if (unit == ProgressUnit::kBytes) return format_bytes(static_cast<double>(amount), "");
  return std::to_string(amount);
}

std::string format_rate(double per_second, ProgressUnit unit) {
  const bool bytes = unit == ProgressUnit::kBytes;
  if (!std::isfinite(per_second) || per_second < 0) return bytes ? "? B/s" : "? it/s";
  if (bytes) return format_bytes(per_second, "/s");
  return printf_string(per_second < 100.0 ? "%.1f it/s" : "%.0f it/s", per_second);
}

std::string render_progress(const std::string& label, int64_t done, int64_t total, double elapsed_seconds,
                            ProgressUnit unit, int bar_width) {
  const double rate = elapsed_seconds > 0 ? static_cast<double>(done) / elapsed_seconds : -1.0;
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on `" " + std::string` chains.
  std::string line = label;
  if (total > 0) {
    const double fraction = std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
    const int width = std::max(bar_width, 1);
    const int filled = static_cast<int>(fraction * width);
    line.append(" [").append(filled, '#').append(width - filled, '-').append("]");
    line.append(printf_string(" %3.0f%%", std::floor(fraction * 100.0)));
    line.append(" ").append(format_amount(done, unit)).append("/").append(format_amount(total, unit));
  } else {
    line.append(" ").append(format_amount(done, unit));
  }
  line.append(" ").append(format_rate(rate, unit));
  if (total > 0) {
    const double eta = done >= total ? 0.0 : rate > 0 ? static_cast<double>(total - done) / rate : -1.0;
    line.append(" ETA ").append(format_duration(eta));
  }
  return line;
}

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, ProgressUnit unit)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      unit_(unit),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(int64_t done) {
  std::lock_guard lock(mutex_);
  done_ = done;
  draw_locked(false);
}

void ProgressBar::advance(int64_t n) {
  std::lock_guard lock(mutex_);
  done_ += n;
  draw_locked(false);
}

int64_t ProgressBar::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void ProgressBar::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  draw_locked(true);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void ProgressBar::draw_locked(bool force) {
  if (!enabled_ || finished_ != force) return;  // after finish() only the final forced draw happens
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  drawn_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int columns = terminal_columns();
  const int bar_width = std::clamp(columns - 60 - static_cast<int>(label_.size()), 10, 40);
  std::string line = render_progress(label_, done_, total_, elapsed, unit_, bar_width);
  if (static_cast<int>(line.size()) >= columns) line.resize(std::max(columns - 1, 0));
  // \r returns to the line start; ESC[K clears what a longer previous line left behind.
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
}

}  // namespace dsinfer
