// Error type and checking macros used across dsinfer. Errors are exceptions carrying a clear message.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsinfer {

// Any failure the user can act on: bad input, bad files, unsupported settings.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates streamable values into a string.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace dsinfer

// Throws dsinfer::Error with the streamed message when the condition is false.
#define DSI_CHECK(cond, ...)        \
  do {                              \
    if (!(cond)) {                  \
      ::dsinfer::fail(__VA_ARGS__); \
    }                               \
  } while (0)
