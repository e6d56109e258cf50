// Leveled logging to stderr. The level comes from set_log_level() or DSINFER_LOG (error|warn|info|debug).
#pragma once
#include <string>

#include "core/error.h"

namespace dsinfer {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "error", "warn", "info", "debug"; throws Error otherwise.
LogLevel parse_log_level(const std::string& name);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_error(Args&&... args) {
  if (log_level() >= LogLevel::kError) log_line(LogLevel::kError, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_level() >= LogLevel::kWarn) log_line(LogLevel::kWarn, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() >= LogLevel::kInfo) log_line(LogLevel::kInfo, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() >= LogLevel::kDebug) log_line(LogLevel::kDebug, str_cat(std::forward<Args>(args)...));
}

}  // namespace dsinfer
