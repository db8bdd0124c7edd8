// ThreadPool: persistent worker threads running parallel_for over an index range.
//
// The calling thread takes part, so a pool of n threads has n - 1 workers. A job is cut
// into chunks that threads claim with an atomic counter (a slow thread takes fewer), and
// parallel_for returns when every chunk is done. Between jobs a worker spins on the job
// counter for a while (decode issues a job every few microseconds) and then sleeps on a
// condition variable, so an idle pool costs no CPU. The spin is a time (set_spin_us): a
// hybrid GPU decode step leaves the pool idle for the device's part of every layer, and
// a worker that slept through it costs a futex wake-up, tens of microseconds, per layer.
#pragma once

#include <atomic>
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
  // How long an idle worker (and parallel_for's caller, waiting for the workers) spins
  // before it sleeps. Default kDefaultSpinUs.
  static constexpr int kDefaultSpinUs = 50;
  void set_spin_us(int us) { spin_ns_.store(static_cast<int64_t>(us) * 1000, std::memory_order_relaxed); }
  // fn(begin, end) over [0, n), in chunks of `grain` indices (0: automatic, about four
  // chunks per thread).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 0);

 private:
  void worker();
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<int> active_{0};       // workers still inside the current job
  std::atomic<int64_t> next_{0};     // next chunk to claim
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, chunk_ = 1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> spin_ns_{int64_t{kDefaultSpinUs} * 1000};
};

// fn(begin, end) over [0, n): on the calling thread when n < min_parallel (a decode
// step's one row costs less than a hand-off), else over the pool.
inline void maybe_parallel_for(ThreadPool& pool, int64_t n, int64_t min_parallel,
                               const std::function<void(int64_t, int64_t)>& fn) {
  if (n < min_parallel) {
    if (n > 0) fn(0, n);
    return;
  }
  pool.parallel_for(n, fn);
}

}  // namespace mt
