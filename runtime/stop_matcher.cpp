#include <algorithm>

#include "runtime/sampling.h"

namespace mt {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of `stop`.
size_t partial_overlap(std::string_view text, std::string_view stop) {
  for (size_t len = std::min(text.size(), stop.size() - 1); len > 0; --len)
    if (text.substr(text.size() - len) == stop.substr(0, len)) return len;
  return 0;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  if (stopped_) return {"", true};
  held_.append(piece);
  // The earliest match wins. No match can start in text already emitted (it would have
  // been a held-back partial), so searching the held text is enough.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string emit = held_.substr(0, first);
    held_.clear();
    return {std::move(emit), true};
  }
  size_t hold = 0;
  for (const std::string& stop : stops_) hold = std::max(hold, partial_overlap(held_, stop));
  std::string emit = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return {std::move(emit), false};
}

std::string StopMatcher::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace mt
