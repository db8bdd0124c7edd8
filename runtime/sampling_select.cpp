// The Sampler's passes over the logits in place: the sparse overrides of logit bias and
// penalties, greedy argmax, and top-k selection. Copying a 150k vocab into candidates costs
// more than choosing from it, and most of it cannot matter: after the first few blocks a
// block's max rarely beats the best token (or the k-th best) so far. So the logits are read
// in blocks of 64, a cheap SIMD max first; single tokens are looked at only where that max
// can change the answer, and overridden tokens always (with their overridden logit).
#include <algorithm>
#include <bit>
#include <limits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "runtime/sampling.h"

namespace mt {
namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr size_t kBlock = 64;

// Up to this k the selection is a heap of k fed by the block scan. A larger k lets few
// blocks be skipped and makes each heap step dearer, so the full copy and nth_element of
// Sampler::top_k do better there (top_k itself leaves its heap at the same k).
constexpr size_t kSelectMax = 1024;

// A block's max, or +inf when it holds NaN or +inf: either way a logit the sampler refuses,
// reported through the one float that the scan looks at anyway.
float block_max_scalar(const float* p, size_t n) {
  float max = -kInfinity;
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    max = max < p[i] ? p[i] : max;
    bad |= !(p[i] < kInfinity);
  }
  return bad ? kInfinity : max;
}

// Spelled out in SSE2 because compilers keep a float max reduction scalar unless told that
// NaN cannot occur (and here it can). maxps drops or keeps a NaN depending on operand
// order; it does not matter, since `bad` catches every NaN.
float block_max(const float* p, size_t n) {
#if defined(__SSE2__)
  if (n == kBlock) {
    const __m128 inf = _mm_set1_ps(kInfinity);
    __m128 max[4], bad[4];  // 4 independent chains of 4 lanes
    for (int j = 0; j < 4; ++j) {
      max[j] = _mm_set1_ps(-kInfinity);
      bad[j] = _mm_setzero_ps();
    }
    for (size_t i = 0; i < kBlock; i += 16) {
      for (int j = 0; j < 4; ++j) {
        const __m128 x = _mm_loadu_ps(p + i + 4 * static_cast<size_t>(j));
        max[j] = _mm_max_ps(max[j], x);
        bad[j] = _mm_or_ps(bad[j], _mm_cmpnlt_ps(x, inf));  // !(x < inf): NaN or +inf
      }
    }
    const __m128 any_bad = _mm_or_ps(_mm_or_ps(bad[0], bad[1]), _mm_or_ps(bad[2], bad[3]));
    if (_mm_movemask_ps(any_bad) != 0) return kInfinity;
    __m128 m = _mm_max_ps(_mm_max_ps(max[0], max[1]), _mm_max_ps(max[2], max[3]));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
#endif
  return block_max_scalar(p, n);
}

// Bit i set: p[i] > bar. In a block worth a look few tokens clear the bar, so one compare
// per 4 floats and a walk over the set bits beat a branch per token.
uint64_t above(const float* p, size_t n, float bar) {
  uint64_t bits = 0;
#if defined(__SSE2__)
  if (n == kBlock) {
    const __m128 b = _mm_set1_ps(bar);
    for (size_t i = 0; i < kBlock; i += 4)
      bits |= static_cast<uint64_t>(_mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(p + i), b))) << i;
    return bits;
  }
#endif
  for (size_t i = 0; i < n; ++i) bits |= static_cast<uint64_t>(p[i] > bar) << i;
  return bits;
}

// Calls visit(id, logit) in id order from token `from` on, for every token that may clear
// bar() (which may rise as visit takes tokens, so a token found above an older bar is still
// worth offering): each overridden token, with its overridden logit (a block's raw max
// says nothing about it), and the other tokens above the bar in a block whose raw max is.
// Checks every raw logit from `from` on, as build_candidates does. `overrides` is sorted
// by id; visit must itself compare a token with the bar.
template <typename Overrides, typename Bar, typename Visit>
void scan(std::span<const float> logits, size_t from, const Overrides& overrides, Bar bar, Visit visit) {
  size_t next = 0;  // the first override not yet passed
  while (next < overrides.size() && static_cast<size_t>(overrides[next].id) < from) ++next;
  for (size_t begin = from; begin < logits.size(); begin += kBlock) {
    const size_t end = std::min(begin + kBlock, logits.size());
    const float* p = logits.data() + begin;
    const float max = block_max(p, end - begin);
    MT_CHECK_MSG(max < kInfinity, "logits must be finite or -inf");
    uint64_t bits = 0;  // bit i: visit token begin + i
    size_t override_at = next;
    for (; next < overrides.size() && static_cast<size_t>(overrides[next].id) < end; ++next)
      bits |= uint64_t{1} << (static_cast<size_t>(overrides[next].id) - begin);
    if (max > bar()) bits |= above(p, end - begin, bar());
    for (; bits != 0; bits &= bits - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(bits));
      float l = p[i];
      if (override_at < next && static_cast<size_t>(overrides[override_at].id) == begin + i)
        l = overrides[override_at++].logit;
      visit(static_cast<int32_t>(begin + i), l);
    }
  }
}

}  // namespace

// Entries are made in the order a full copy would apply them (a token's biases in params
// order, then its penalty), starting from the raw logit, so each value is bit-identical to
// what apply-to-a-copy gives. The bias list is walked already sorted by token
// (bias_by_id_), so it comes out sorted; the penalised tokens (a window's worth) are found
// in it by binary search or appended, sorted and merged in: a call costs O(entries), never
// O(vocab), and touches no per-token table.
void Sampler::build_overrides(std::span<const float> logits) {
  overrides_.clear();
  const float rp = params_.repeat_penalty;
  const float fp = params_.frequency_penalty;
  const float pp = params_.presence_penalty;
  const bool penalties = rp != 1.0f || fp != 0.0f || pp != 0.0f;
  for (size_t i = 0; i < bias_by_id_.size();) {
    const int32_t token = bias_by_id_[i].first;
    MT_CHECK(static_cast<uint32_t>(token) < n_vocab_);
    float l = logits[static_cast<size_t>(token)];
    for (; i < bias_by_id_.size() && bias_by_id_[i].first == token; ++i) {
      const float bias = bias_by_id_[i].second;
      l = bias <= -100 ? -kInfinity : l + bias;
    }
    overrides_.push_back({token, l});
  }
  if (!penalties || window_.counts().empty()) return;
  auto by_id = [](const Override& a, const Override& b) { return a.id < b.id; };
  const size_t biased = overrides_.size();
  for (const auto& [token, count] : window_.counts()) {
    const auto end = overrides_.begin() + static_cast<std::ptrdiff_t>(biased);
    const auto it = std::lower_bound(overrides_.begin(), end, Override{token, 0.0f}, by_id);
    size_t at = static_cast<size_t>(it - overrides_.begin());
    if (it == end || it->id != token) {
      at = overrides_.size();
      overrides_.push_back({token, logits[static_cast<size_t>(token)]});
    }
    float& l = overrides_[at].logit;
    if (l == -kInfinity) continue;  // a mask stays a mask
    if (rp != 1.0f) l = l > 0 ? l / rp : l * rp;
    l -= static_cast<float>(count) * fp + pp;
  }
  const auto tail = overrides_.begin() + static_cast<std::ptrdiff_t>(biased);
  std::sort(tail, overrides_.end(), by_id);
  std::inplace_merge(overrides_.begin(), tail, overrides_.end(), by_id);
}

// The first token with the highest logit (strict >, in id order: the lowest id wins ties).
// Only a token above the best so far can be a new best.
int32_t Sampler::greedy(std::span<const float> logits) const {
  int32_t best = 0;
  float best_logit = -kInfinity;
  scan(
      logits, 0, overrides_, [&] { return best_logit; },
      [&](int32_t id, float l) {
        if (l > best_logit) {
          best_logit = l;
          best = id;
        }
      });
  MT_CHECK_MSG(best_logit > -kInfinity, "every token is masked (-inf)");
  return best;
}

bool Sampler::selects_top_k() const {
  const auto k = static_cast<size_t>(params_.top_k);
  return k > 0 && k <= kSelectMax && k < n_vocab_;
}

// The k best by (logit desc, id asc), exactly the set and order that Sampler::top_k's sort
// gives, as candidates. A heap holds the k best so far, its worst on top; the first k
// tokens fill it whatever their logits (-inf too: with fewer than k unmasked tokens, masked
// ones make up the k, lowest ids first, as in the sort). Later tokens come in id order, so
// a newcomer has a higher id than every token held and must beat the worst held logit
// strictly: on a tie the held token wins. That logit is the scan's bar.
void Sampler::select_top_k(std::span<const float> logits) {
  const auto k = static_cast<size_t>(params_.top_k);
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  candidates_.clear();
  size_t next = 0;  // the first override not yet used
  for (size_t i = 0; i < k; ++i) {
    float l = logits[i];
    MT_CHECK_MSG(l < kInfinity, "logits must be finite or -inf");
    if (next < overrides_.size() && static_cast<size_t>(overrides_[next].id) == i) l = overrides_[next++].logit;
    candidates_.push_back({static_cast<int32_t>(i), l, 0.0f});
  }
  std::make_heap(candidates_.begin(), candidates_.end(), by_logit);
  float worst = candidates_.front().logit;  // the worst held logit
  scan(
      logits, k, overrides_, [&] { return worst; },
      [&](int32_t id, float l) {
        if (!(l > worst)) return;
        std::pop_heap(candidates_.begin(), candidates_.end(), by_logit);
        candidates_.back() = {id, l, 0.0f};
        std::push_heap(candidates_.begin(), candidates_.end(), by_logit);
        worst = candidates_.front().logit;
      });
  std::sort_heap(candidates_.begin(), candidates_.end(), by_logit);  // best first
  sorted_ = true;  // exp is monotone, so the weights will be non-increasing too
}

}  // namespace mt
