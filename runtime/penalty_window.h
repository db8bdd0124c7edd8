// The recent-token window the repetition penalties read: the last `capacity` accepted
// tokens and how often each occurs among them, updated in O(1) per accepted token, so a
// sample costs one pass over the distinct tokens of the window, never over the history.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

namespace mt {

class PenaltyWindow {
 public:
  // capacity: tokens remembered; -1 = every token since clear(), 0 = none.
  explicit PenaltyWindow(int32_t capacity);

  void push(int32_t token);
  void clear();

  // token -> occurrences in the window (every count > 0). Iteration order is unspecified,
  // so a reader must treat each token independently.
  const std::unordered_map<int32_t, int32_t>& counts() const { return counts_; }

 private:
  int32_t capacity_;
  std::deque<int32_t> tokens_;  // (min(capacity, pushed)) oldest first; unused when unbounded
  std::unordered_map<int32_t, int32_t> counts_;
};

}  // namespace mt
