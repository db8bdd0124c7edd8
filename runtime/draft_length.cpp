#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

namespace {
constexpr double kDecay = 0.95;       // the acceptance counts' memory: about the last 20 drafted steps
}  // namespace

// ---- the cost model

double DraftLength::Samples::estimate() const {
  const int k = std::min(n, kKept);
  if (k == 0) return 0;
  double v[kKept];
  for (int i = 0; i < k; ++i) {  // insertion into order (five at most)
    int j = i;
    for (; j > 0 && v[j - 1] > s[i]; --j) v[j] = v[j - 1];
    v[j] = s[i];
  }
  return k < 3 ? v[0] : v[k / 2];
}

DraftLength::DraftLength(int min_len, int max_len)
    : min_(std::max(min_len, 0)),
      max_(std::max(max_len, 0)),
      samples_(static_cast<size_t>(std::max(max_len, 0)) + 2),
      seen_at_(samples_.size(), 0) {
  MT_CHECK(min_ <= max_);
}

void DraftLength::take_costs(const DraftLength& other) {
  MT_CHECK(other.samples_.size() == samples_.size());
  samples_ = other.samples_;
  seen_at_ = other.seen_at_;
  observed_ = other.observed_;
}

double DraftLength::acceptance() const { return kept_ / (kept_ + missed_); }

double DraftLength::expected_tokens(int guesses, double p) {
  if (p >= 1) return guesses + 1.0;
  return (1 - std::pow(p, guesses + 1)) / (1 - p);
}

int DraftLength::measured_rows() const {
  int measured = 0;
  for (const Samples& c : samples_) measured += c.n > 0;
  return measured;
}

double DraftLength::step_seconds(int rows) const {
  MT_CHECK(rows >= 1 && static_cast<size_t>(rows) < samples_.size());
  if (samples_[static_cast<size_t>(rows)].n > 0) return cost(rows);
  // The nearest measured row counts below and above; beyond the measured ones, the line
  // through the last two of them.
  std::vector<int> measured;
  for (int n = 1; n < static_cast<int>(samples_.size()); ++n) if (samples_[static_cast<size_t>(n)].n > 0) measured.push_back(n);
  if (measured.empty()) return 0;
  if (measured.size() == 1) return cost(measured[0]);
  auto upper = std::upper_bound(measured.begin(), measured.end(), rows);
  int a, b;
  if (upper == measured.begin()) {
    a = measured[0], b = measured[1];
  } else if (upper == measured.end()) {
    a = measured[measured.size() - 2], b = measured.back();
  } else {
    a = *(upper - 1), b = *upper;
  }
  const double ca = cost(a), cb = cost(b);
  const double slope = (cb - ca) / (b - a);
  return std::max(ca + slope * (rows - a), 0.25 * std::min(ca, cb));  // a falling line is not trusted below a quarter
}

double DraftLength::rate(int guesses) const {
  const double s = step_seconds(guesses + 1);
  return s > 0 ? expected_tokens(guesses, acceptance()) / s : 0.0;
}

int DraftLength::best_from(int shortest, double* best_rate) const {
  int best = max_;
  *best_rate = 0;
  for (int len = shortest; len <= max_; ++len) {
    const double r = rate(len);
    if (r > *best_rate * (1 + 1e-9)) best = len, *best_rate = r;  // ties: the shorter
  }
  return best;
}

int DraftLength::choose() const {
  if (measured_rows() < 2) return max_;  // the first draft spans the range: the line through 1 and max + 1 rows
  double r;
  const int best = best_from(min_, &r);
  if (observed_ % kProbeEvery != kProbeEvery - 1) return best;
  // A probe: the neighbour measured longest ago (a never-measured one first; ties: the longer)
  int probe = best;
  uint64_t oldest = UINT64_MAX;
  for (int len : {best + 1, best - 1}) {
    if (len < min_ || len > max_) continue;
    const uint64_t seen = seen_at_[static_cast<size_t>(len) + 1];
    if (seen < oldest) probe = len, oldest = seen;
  }
  return probe;
}

double DraftLength::gain() const {
  if (samples_[1].n == 0 || measured_rows() < 2) return 0;
  double best;
  best_from(std::max(min_, 1), &best);
  return best / rate(0);
}

void DraftLength::observe(int guesses, int accepted, double seconds) {
  MT_CHECK(guesses >= 0 && accepted >= 0 && accepted <= guesses && guesses <= max_);
  if (seconds >= 0) {
    Samples& c = samples_[static_cast<size_t>(guesses) + 1];
    c.s[c.n % kKept] = seconds;
    ++c.n;
    seen_at_[static_cast<size_t>(guesses) + 1] = ++observed_;
  }
  if (guesses == 0) return;
  kept_ = kDecay * kept_ + accepted;
  missed_ = kDecay * missed_ + (accepted < guesses ? 1 : 0);
}

// ---- whether drafting pays

bool SpecThrottle::draft(uint64_t step) const {
  if (step < plain_first_) return false;  // measure plain steps first
  if (step < off_until_) return false;    // backed off
  return step == 0 || step % (last_gain_ >= kSureGain ? kPlainEverySure : kPlainEvery) != 0;
}

void SpecThrottle::observe(uint64_t step, int guesses, double gain) {
  if (step < off_until_) ++off_steps_;
  if (guesses == 0) return;
  ++drafted_n_;
  // The first verdict waits for kMinDrafted drafted steps; a re-probe after a back-off is
  // judged on its first step (drafting lost already: each probe costs, so it is kept short).
  const int need = backoff_ > kFirstBackoff ? 1 : kMinDrafted;
  if (gain <= 0 || drafted_n_ < need) return;
  drafted_n_ = 0;
  last_gain_ = gain;
  if (gain < 1 + kMargin) {  // not paying: plain steps for a while, longer each time
    off_until_ = step + 1 + backoff_;
    backoff_ = std::min<uint64_t>(backoff_ * 2, 256);
  } else {
    backoff_ = kFirstBackoff;
  }
}

// ---- the two together

DraftPolicy::DraftPolicy(int min_len, int max_len, bool adaptive, bool throttle)
    : max_(std::max(max_len, 0)), adaptive_(adaptive), throttled_(adaptive && throttle), length_(min_len, max_len) {}

void DraftPolicy::warm_start(const DraftPolicy& other) {
  length_.take_costs(other.length_);
  throttle_.skip_plain_first();
}

int DraftPolicy::next(uint64_t step) const {
  if (!adaptive_) return max_;
  if (throttled_ && !throttle_.draft(step)) return 0;
  return length_.choose();
}

void DraftPolicy::observe(uint64_t step, int guesses, int accepted, double seconds, bool set_up) {
  if (!adaptive_) return;
  // The first step's time is the sequence's set-up, whatever the backend reports.
  length_.observe(guesses, accepted, step > 0 && !set_up ? seconds : -1.0);
  if (throttled_) throttle_.observe(step, guesses, length_.gain());
}

}  // namespace mt
