// PendingGeneration: one HTTP request's generation in flight, between two threads. The
// scheduler's thread pushes events (push never waits on the client: it appends under a
// short lock and returns); the HTTP thread takes them in order, waiting a bounded time so
// it can notice a client that went away. Once the client is gone, push returns false and
// the scheduler drops the request. Time to first text and the gaps between pieces are
// observed here, on arrival, into the server's metrics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "server/metrics.h"
#include "server/scheduler.h"

namespace mt::server {

class PendingGeneration {
 public:
  PendingGeneration(ServerMetrics* metrics, std::chrono::steady_clock::time_point arrived)
      : metrics_(metrics), arrived_(arrived), last_text_(arrived) {}

  // Scheduler thread. False once abandon() was called.
  bool push(const GenerationEvent& event);

  // HTTP thread: the events that arrived, waiting up to `wait` when there are none yet.
  std::vector<GenerationEvent> take(std::chrono::milliseconds wait);

  // The client went away: later pushes return false.
  void abandon();

 private:
  ServerMetrics* metrics_;
  std::chrono::steady_clock::time_point arrived_, last_text_;  // last_text_: scheduler thread only
  bool seen_text_ = false;                                     // scheduler thread only
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
  bool abandoned_ = false;
};

}  // namespace mt::server
