#include "server/generation.h"

namespace mt::server {

bool PendingGeneration::push(const GenerationEvent& event) {
  if (event.kind == GenerationEvent::Kind::kText && event.token >= 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!seen_text_) {
      metrics_->observe_time_to_first_token(std::chrono::duration<double>(now - arrived_).count());
      seen_text_ = true;
    } else {
      metrics_->observe_token_latency(std::chrono::duration<double>(now - last_text_).count());
    }
    last_text_ = now;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abandoned_) return false;
    events_.push_back(event);
  }
  ready_.notify_one();
  return true;
}

std::vector<GenerationEvent> PendingGeneration::take(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, wait, [&] { return !events_.empty(); });
  std::vector<GenerationEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void PendingGeneration::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  abandoned_ = true;
  events_.clear();
}

}  // namespace mt::server
