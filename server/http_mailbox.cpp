#include "server/http_mailbox.h"

#include <unistd.h>

namespace mt::server {

void Waker::operator()() const {
  if (box_) box_->wake(connection_);
}

void Mailbox::open(int event_fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  event_fd_ = event_fd;
  closed_ = false;
}

void Mailbox::ring() {
  const uint64_t one = 1;
  if (event_fd_ >= 0) [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof one);
}

void Mailbox::post(uint64_t connection, HandlerResult result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_) {
      const bool idle = contents_.done.empty() && contents_.woken.empty();
      contents_.done.push_back({connection, std::move(result)});
      if (idle) ring();
      return;
    }
  }
  if (result.deferred) result.deferred->abandon();
}

void Mailbox::wake(uint64_t connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  const bool idle = contents_.done.empty() && contents_.woken.empty();
  contents_.woken.push_back(connection);
  if (idle) ring();
}

void Mailbox::request_stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  contents_.stop = true;
  ring();
}

Mailbox::Contents Mailbox::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  Contents out;
  out.woken.swap(contents_.woken);
  out.done.swap(contents_.done);
  out.stop = contents_.stop;
  return out;
}

std::vector<Mailbox::Done> Mailbox::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  event_fd_ = -1;
  contents_.woken.clear();
  return std::move(contents_.done);
}

void WorkerPool::start(uint32_t threads) {
  for (uint32_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          ready_.wait(lock, [&] { return closed_ || !tasks_.empty(); });
          if (closed_) return;
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    });
  }
}

void WorkerPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    tasks_.clear();
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace mt::server
