// ThreadPool: a fixed set of worker threads running parallel_for over an index range.
//
// The calling thread takes part in the work, so a pool of n threads has n - 1 workers.
// Work is split into contiguous chunks, one per thread; parallel_for returns when every
// chunk is done. (The fast CPU issue replaces the condition-variable hand-off with a
// spin-then-sleep barrier; the interface stays.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mt {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return n_threads_; }
  // fn(begin, end) over [0, n) split into at most size() contiguous chunks.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace mt
