#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

namespace {
constexpr double kCostWeight = 0.25;  // a new step's share of its row count's moving average
constexpr double kDecay = 0.95;       // the acceptance counts' memory: about the last 20 steps
}  // namespace

DraftLength::DraftLength(int min_len, int max_len)
    : min_(std::max(min_len, 0)), max_(std::max(max_len, 0)), cost_(static_cast<size_t>(std::max(max_len, 0)) + 2, 0.0) {
  MT_CHECK(min_ <= max_);
}

double DraftLength::acceptance() const { return kept_ / (kept_ + missed_); }

double DraftLength::expected_tokens(int guesses, double p) {
  if (p >= 1) return guesses + 1.0;
  return (1 - std::pow(p, guesses + 1)) / (1 - p);
}

double DraftLength::step_seconds(int rows) const {
  MT_CHECK(rows >= 1 && static_cast<size_t>(rows) < cost_.size());
  if (cost_[static_cast<size_t>(rows)] > 0) return cost_[static_cast<size_t>(rows)];
  // The nearest measured row counts below and above; beyond the measured ones, the line
  // through the last two of them.
  std::vector<int> measured;
  for (int n = 1; n < static_cast<int>(cost_.size()); ++n) if (cost_[static_cast<size_t>(n)] > 0) measured.push_back(n);
  if (measured.empty()) return 0;
  if (measured.size() == 1) return cost_[static_cast<size_t>(measured[0])];
  auto upper = std::upper_bound(measured.begin(), measured.end(), rows);
  int a, b;
  if (upper == measured.begin()) {
    a = measured[0], b = measured[1];
  } else if (upper == measured.end()) {
    a = measured[measured.size() - 2], b = measured.back();
  } else {
    a = *(upper - 1), b = *upper;
  }
  const double ca = cost_[static_cast<size_t>(a)], cb = cost_[static_cast<size_t>(b)];
  const double slope = (cb - ca) / (b - a);
  return std::max(ca + slope * (rows - a), 0.25 * std::min(ca, cb));  // a falling line is not trusted below a quarter
}

int DraftLength::choose() const {
  int measured = 0;
  for (double c : cost_) measured += c > 0;
  if (measured < 2) return max_;
  const double p = acceptance();
  int best = max_;
  double best_rate = 0;
  for (int len = min_; len <= max_; ++len) {
    const double rate = expected_tokens(len, p) / step_seconds(len + 1);
    if (rate > best_rate * (1 + 1e-9)) best = len, best_rate = rate;  // ties: the shorter
  }
  return best;
}

void DraftLength::observe(int guesses, int accepted, double seconds) {
  MT_CHECK(guesses >= 0 && accepted >= 0 && accepted <= guesses && guesses <= max_);
  double& c = cost_[static_cast<size_t>(guesses) + 1];
  c = c == 0 ? seconds : c + kCostWeight * (seconds - c);
  if (guesses == 0) return;
  kept_ = kDecay * kept_ + accepted;
  missed_ = kDecay * missed_ + (accepted < guesses ? 1 : 0);
}

}  // namespace mt
