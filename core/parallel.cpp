#include "core/parallel.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MT_CPU_RELAX() _mm_pause()
#else
#define MT_CPU_RELAX() ((void)0)
#endif

namespace mt {
namespace {

// Spins until done() or spin_ns have passed; true when done() held. The clock is read
// every 64 pauses (a pause is 10-150 cycles depending on the core).
template <class Done>
bool spin_until(const Done& done, int64_t spin_ns) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      MT_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() - start >= std::chrono::nanoseconds(spin_ns)) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    const int64_t begin = c * chunk_;
    if (begin >= job_n_) return;
    (*job_)(begin, std::min(job_n_, begin + chunk_));
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next job, then sleep.
    const bool woke = spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; },
                                 spin_ns_.load(std::memory_order_relaxed));
    if (!woke) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleeping_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_chunks();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  MT_CHECK_MSG(active_.load() == 0, "parallel_for is not reentrant");
  // About four chunks per thread balances uneven rows without much claiming traffic.
  const int64_t chunk = grain > 0 ? grain : std::max<int64_t>(1, n / (static_cast<int64_t>(n_threads_) * 4));
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load() > 0) wake_.notify_all();
  run_chunks();
  // Wait for the workers: spin briefly, then sleep.
  const bool done = spin_until([&] { return active_.load(std::memory_order_acquire) == 0; },
                               spin_ns_.load(std::memory_order_relaxed));
  if (!done) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
}

}  // namespace mt
