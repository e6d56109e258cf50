// Settings read from the environment (DSINFER_*): a value must be one of the setting's named choices, or
// the variable unset / empty for its default; anything else is an error that names the choices, so a typo
// never silently runs a different path. Header-only: the CUDA library and the host library both use it.
#pragma once
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace dsinfer {

// The index of `value` among `names`; `unset` for a null or empty value; otherwise throws an Error that
// names `var` and the choices.
inline int parse_env_choice(const char* var, const char* value, std::initializer_list<const char*> names,
                            int unset) {
  if (value == nullptr || *value == '\0') return unset;
  std::string choices;
  int i = 0;
  for (const char* n : names) {
    if (std::strcmp(value, n) == 0) return i;
    if (i++ > 0) choices.push_back('|');
    choices.append(n);
  }
  fail(var, " must be ", choices, ", got \"", value, "\"");
}

// parse_env_choice of the environment variable `var`.
inline int env_choice(const char* var, std::initializer_list<const char*> names, int unset) {
  return parse_env_choice(var, std::getenv(var), names, unset);
}

// A 0/1 switch: `fallback` when unset or empty, else the value (0 or 1; anything else throws).
inline bool env_switch(const char* var, bool fallback) {
  return env_choice(var, {"0", "1"}, fallback ? 1 : 0) == 1;
}

// An integer setting: `fallback` when unset or empty, else the value, which must be a whole decimal integer
// in [lo, hi] (anything else throws an Error naming `var` and the range).
inline int parse_env_int(const char* var, const char* value, int fallback, int lo, int hi) {
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
    fail(var, " must be an integer in [", lo, ", ", hi, "], got \"", value, "\"");
  return static_cast<int>(v);
}

// parse_env_int of the environment variable `var`.
inline int env_int(const char* var, int fallback, int lo = 0, int hi = INT_MAX) {
  return parse_env_int(var, std::getenv(var), fallback, lo, hi);
}

}  // namespace dsinfer
