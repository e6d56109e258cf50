// Log level state and the stderr sink (one line per call, timestamped, serialised).
#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace dsinfer {

namespace {

LogLevel initial_level() {
  const char* env = std::getenv("DSINFER_LOG");
  if (!env) return LogLevel::kWarn;
  try {
    return parse_log_level(env);
  } catch (const Error&) {
    return LogLevel::kWarn;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void set_log_level(LogLevel level) {
  level_storage() = static_cast<int>(level);
}
LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}

LogLevel parse_log_level(const std::string& name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  fail("unknown log level \"", name, "\" (use error, warn, info or debug)");
}

void log_line(LogLevel level, const std::string& message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(sink_mutex());
  std::fprintf(stderr, "%s.%03lldZ %s %s\n", stamp, static_cast<long long>(ms),
               names[static_cast<int>(level)], message.c_str());
}

}  // namespace dsinfer
