// How the other threads reach the loop of http_loop.h: a Mailbox (results of handlers,
// wake-ups for deferred replies, the stop request) rung through an eventfd the loop polls,
// and the WorkerPool whose threads run the handlers. Once the loop has ended the mailbox is
// closed: a result posted then is abandoned on the poster's thread, a wake-up is dropped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http_loop.h"

namespace mt::server {

struct Mailbox {
  struct Done {
    uint64_t connection;
    HandlerResult result;
  };
  struct Contents {
    std::vector<uint64_t> woken;
    std::vector<Done> done;
    bool stop = false;
  };

  void open(int event_fd);
  void post(uint64_t connection, HandlerResult result);  // any thread
  void wake(uint64_t connection);                        // any thread
  void request_stop();                                   // any thread
  Contents take();                                       // the loop
  std::vector<Done> close();                             // the loop, at its end: what was left

 private:
  // Under mutex_. Only the first entry after the loop's take() rings: the loop reads the
  // eventfd before it takes, so later entries are seen by that take or ring again.
  void ring();

  std::mutex mutex_;
  int event_fd_ = -1;
  bool closed_ = false;
  Contents contents_;
};

// Threads that run tasks in order of arrival; stop() drops the tasks not begun and joins.
class WorkerPool {
 public:
  ~WorkerPool() { stop(); }
  void start(uint32_t threads);
  void post(std::function<void()> task);
  void stop();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mt::server
