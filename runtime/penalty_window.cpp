#include "runtime/penalty_window.h"

#include "core/check.h"

namespace mt {

PenaltyWindow::PenaltyWindow(int32_t capacity) : capacity_(capacity) { MT_CHECK(capacity >= -1); }

void PenaltyWindow::push(int32_t token) {
  if (capacity_ == 0) return;
  ++counts_[token];
  if (capacity_ < 0) return;
  tokens_.push_back(token);
  if (tokens_.size() <= static_cast<std::size_t>(capacity_)) return;
  const int32_t oldest = tokens_.front();
  tokens_.pop_front();
  auto it = counts_.find(oldest);
  MT_CHECK(it != counts_.end() && it->second > 0);
  if (--it->second == 0) counts_.erase(it);
}

void PenaltyWindow::clear() {
  tokens_.clear();
  counts_.clear();
}

}  // namespace mt
