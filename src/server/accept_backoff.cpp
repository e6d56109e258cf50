// AcceptBackoff: the delay and the log rate limit after a failed accept.
#include "server/accept_backoff.h"

#include <cerrno>

namespace dsinfer::server {

bool AcceptBackoff::exhausted(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

AcceptBackoff::Retry AcceptBackoff::on_error(const boost::system::error_code& ec, Clock::time_point now) {
  Retry r;
  r.delay = exhausted(ec) ? delay_ : std::chrono::milliseconds(0);
  ++unlogged_;
  if (!logged_ || now - last_log_ >= log_every_) {
    r.log = true;
    r.failures = unlogged_;
    unlogged_ = 0;
    logged_ = true;
    last_log_ = now;
  }
  return r;
}

}  // namespace dsinfer::server
