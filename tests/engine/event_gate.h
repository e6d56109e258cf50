// A test helper that holds the engine thread inside a request's event callback once the request has produced
// a given number of tokens, until the test releases it: the test can then cancel, shut down or submit at a
// known point of the request however the threads are scheduled (a test thread held up on a loaded machine
// would otherwise let the request run to its end first). Events are delivered outside the engine's lock, so
// cancel() and submit() do not wait for a held callback; release before anything that joins the engine
// thread (shutdown). A held callback gives up after 60 s, so a test that forgets to release cannot hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <utility>

#include "dsinfer/engine.h"

namespace dsinfer {

class EventGate {
 public:
  using Callback = std::function<void(const RequestEvent&)>;

  // `inner` first, then, on the event that brings the request to `tokens` tokens or more (once), the hold.
  Callback wrap(Callback inner, size_t tokens) {
    return [this, inner = std::move(inner), tokens, seen = size_t{0},
            held = false](const RequestEvent& e) mutable {
      inner(e);
      seen += e.token_ids.size();
      if (seen >= tokens && !held) {
        held = true;
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait_for(lock, std::chrono::seconds(60), [&] { return released_; });
      }
    };
  }

  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool released_ = false;
};

}  // namespace dsinfer
