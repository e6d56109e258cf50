// What the listener does after a failed accept. Running out of descriptors, buffers or memory (EMFILE,
// ENFILE, ENOBUFS, ENOMEM) is not cured by accepting again at once: the pending connection stays in the
// backlog and the retry fails the same way, a busy loop at 100% CPU. Those errors wait `delay` before the
// next accept; other errors (a connection aborted before it was accepted) are per-connection and retried at
// once. Either way the warning is logged at most once per `log_every`, with the count of failures since.
#pragma once
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>

namespace dsinfer::server {

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  struct Retry {
    std::chrono::milliseconds delay{0};  // before the next accept
    bool log = false;                    // log this failure now
    uint64_t failures = 0;               // failures since the last logged one, this one included
  };

  explicit AcceptBackoff(std::chrono::milliseconds delay = std::chrono::milliseconds(100),
                         std::chrono::milliseconds log_every = std::chrono::seconds(10))
      : delay_(delay), log_every_(log_every) {}

  Retry on_error(const boost::system::error_code& ec, Clock::time_point now);

  // Out of descriptors, buffers or memory.
  static bool exhausted(const boost::system::error_code& ec);

 private:
  std::chrono::milliseconds delay_;
  std::chrono::milliseconds log_every_;
  Clock::time_point last_log_{};
  bool logged_ = false;
  uint64_t unlogged_ = 0;
};

}  // namespace dsinfer::server
