// The truncation steps of Sampler: top-k, min-p and top-p over the candidate list.
// Each keeps a deterministic order (see sampling.h) and sorts no more than it must.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "runtime/sampling.h"

namespace mt {
namespace {

// Up to this k, top-k is a heap selection (std::partial_sort: one comparison for most
// tokens); above it, nth_element then a sort of the k.
constexpr size_t kHeapSelectMax = 1024;

// top-p's radix select. Non-negative floats order like their bit patterns, so three
// levels of buckets over the bits of the weight (12, 10 and 10 of them, most significant
// first) order the weights exactly; a level's key grows as the weight shrinks.
constexpr uint32_t kRadixBuckets = 1024;
constexpr uint32_t kOneTop = std::bit_cast<uint32_t>(1.0f) >> 20;  // 0 <= w <= 1: top <= this

uint32_t radix_key(float w, int level) {
  const uint32_t bits = std::bit_cast<uint32_t>(w);
  if (level == 0) return kOneTop - (bits >> 20);
  return kRadixBuckets - 1 - ((bits >> (level == 1 ? 10 : 0)) & (kRadixBuckets - 1));
}

// Mass per bucket of one radix level. Four interleaved histograms, so that runs of equal
// keys (a flat tail) are not one long chain of dependent additions.
template <typename Candidates>
std::array<double, kRadixBuckets> mass_per_bucket(const Candidates& cands, int level) {
  std::array<std::array<double, kRadixBuckets>, 4> lanes{};
  for (size_t i = 0; i < cands.size(); ++i)
    lanes[i % 4][radix_key(cands[i].weight, level)] += cands[i].weight;
  std::array<double, kRadixBuckets> hist;
  for (uint32_t b = 0; b < kRadixBuckets; ++b)
    hist[b] = (lanes[0][b] + lanes[1][b]) + (lanes[2][b] + lanes[3][b]);
  return hist;
}

}  // namespace

void Sampler::top_k() {
  const size_t k = static_cast<size_t>(params_.top_k);
  if (k == 0 || k >= candidates_.size()) return;
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  auto mid = candidates_.begin() + static_cast<std::ptrdiff_t>(k);
  if (k <= kHeapSelectMax) {
    std::partial_sort(candidates_.begin(), mid, candidates_.end(), by_logit);
  } else {
    std::nth_element(candidates_.begin(), mid - 1, candidates_.end(), by_logit);
    std::sort(candidates_.begin(), mid, by_logit);
  }
  candidates_.resize(k);
  sorted_ = true;  // exp is monotone, so the weights will be non-increasing too
}

// With top-p off nothing needs the weights of tokens min-p will drop, so drop them before
// paying for exp. The margin (in log space) leaves the exact decision to min_p().
void Sampler::min_p_by_logit(float max) {
  if (params_.min_p <= 0 || params_.top_p < 1) return;
  const float t = params_.temperature;
  const float cut = std::log(params_.min_p) - 1e-3f;
  size_t kept = 0;
  for (size_t i = 0; i < candidates_.size(); ++i)
    if ((candidates_[i].logit - max) / t >= cut) candidates_[kept++] = candidates_[i];
  candidates_.resize(kept);  // the best token (0 >= cut) always stays
}

// Drops weights below min_p (the max weight is 1). Stable, so a sorted list stays sorted.
double Sampler::min_p(double total) {
  if (params_.min_p <= 0) return total;
  const float threshold = params_.min_p;
  size_t kept = 0;
  double mass = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].weight < threshold) continue;
    mass += candidates_[i].weight;
    candidates_[kept++] = candidates_[i];
  }
  candidates_.resize(kept);
  return mass;
}

// Keeps the smallest most-likely prefix (weight desc, id asc) holding top_p of
// `total_before_min_p` (min-p has already cut the list; see Sampler::sample), up to the
// rounding of the mass sums. A list top-k sorted is walked. An unsorted one is in id order
// and is never sorted: a radix select finds, level by level, the bucket where the prefix
// ends; heavier buckets are kept, lighter ones dropped, and only the boundary bucket goes
// on to the next level. After the last level it holds one weight value, in id order.
// Every step is stable, so the kept list (the draw's order) is deterministic.
double Sampler::top_p(double total_before_min_p, double total) {
  if (params_.top_p >= 1) return total;
  const double target = static_cast<double>(params_.top_p) * total_before_min_p;
  size_t n = 0;  // candidates_[0, n) are kept
  double mass = 0;
  if (!sorted_) {
    scratch_.swap(candidates_);  // the boundary group, in id order
    candidates_.resize(scratch_.size());
    for (int level = 0; level < 3 && mass < target; ++level) {
      const std::array<double, kRadixBuckets> hist = mass_per_bucket(scratch_, level);
      uint32_t cut = 0;
      for (double m = mass; cut + 1 < kRadixBuckets && m + hist[cut] < target; ++cut)
        m += hist[cut];
      size_t group = 0;
      bool one_value = true;  // then the group is in its final order: no further level
      for (size_t i = 0; i < scratch_.size(); ++i) {
        const Candidate c = scratch_[i];
        const uint32_t key = radix_key(c.weight, level);
        if (key < cut) {
          mass += c.weight;
          candidates_[n++] = c;
        } else if (key == cut) {
          one_value &= group == 0 || c.weight == scratch_[0].weight;
          scratch_[group++] = c;
        }
      }
      scratch_.resize(group);
      if (one_value) break;
    }
    for (size_t i = 0; i < scratch_.size() && mass < target; ++i) {
      mass += scratch_[i].weight;
      candidates_[n++] = scratch_[i];
    }
    candidates_.resize(n);  // the rest of the buffer is stale
    return mass;
  }
  while (n < candidates_.size() && mass < target) mass += candidates_[n++].weight;
  candidates_.resize(n);
  return mass;
}

}  // namespace mt
