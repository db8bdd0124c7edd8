// Greedy and top-k choose from the logits in place, block by block, with bias and penalties
// as a sparse override list (runtime/sampling_select.cpp). They must give exactly the
// tokens of the plain pipeline over a full copy: checked draw for draw against a reference
// written that way, on ties, masks, bans, biases and penalties, at vocab sizes around the
// block size and at a real one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/sampling.h"

namespace mt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The documented pipeline over a full copy, written plainly: bias, penalties, then argmax,
// or a sort by (logit desc, id asc) cut to top_k, softmax, min-p, top-p and one draw. Its
// float operations and sums run in the Sampler's order, so the tokens must match exactly.
// Only for what the in-place paths serve: temperature 0, or 0 < top_k < n.
class Reference {
 public:
  Reference(const SamplingParams& p, uint32_t n) : p_(p), n_(n), rng_(p.seed) {}

  void accept(int32_t token) { history_.push_back(token); }

  int32_t sample(const std::vector<float>& raw) {
    std::vector<float>& l = logits_;
    l = raw;
    adjust(l);
    if (p_.temperature == 0) {
      size_t best = 0;
      for (size_t i = 1; i < n_; ++i)
        if (l[i] > l[best]) best = i;
      return static_cast<int32_t>(best);
    }
    std::vector<int32_t>& ids = ids_;
    ids.resize(n_);
    std::iota(ids.begin(), ids.end(), 0);
    const auto k = static_cast<size_t>(p_.top_k);
    auto by_logit = [&](int32_t a, int32_t b) {
      return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
    };
    if (2 * k < n_)  // a total order: the same k in the same order either way, sort is quicker for large k
      std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), by_logit);
    else
      std::sort(ids.begin(), ids.end(), by_logit);
    ids.resize(k);
    const float max = l[size_t(ids[0])];
    std::vector<float> w;
    double total = 0;
    for (int32_t id : ids) {
      w.push_back(std::exp((l[size_t(id)] - max) / p_.temperature));
      total += w.back();
    }
    double kept = total;
    if (p_.min_p > 0) {  // drop weights below min_p, keeping the order
      size_t n = 0;
      kept = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (w[i] < p_.min_p) continue;
        kept += w[i];
        ids[n] = ids[i];
        w[n++] = w[i];
      }
      ids.resize(n);
      w.resize(n);
    }
    if (p_.top_p < 1) {  // the shortest prefix holding top_p of the mass before min-p
      const double target = static_cast<double>(p_.top_p) * total;
      size_t n = 0;
      kept = 0;
      while (n < ids.size() && kept < target) kept += w[n++];
      ids.resize(n);
      w.resize(n);
    }
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept;
    double mass = 0;
    int32_t last = -1;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (w[i] <= 0) continue;
      mass += w[i];
      last = ids[i];
      if (u < mass) return ids[i];
    }
    return last;
  }

 private:
  void adjust(std::vector<float>& l) const {
    for (const auto& [token, bias] : p_.logit_bias) {
      float& x = l[size_t(token)];
      x = bias <= -100 ? kNegInf : x + bias;
    }
    const float rp = p_.repeat_penalty, fp = p_.frequency_penalty, pp = p_.presence_penalty;
    if (rp == 1.0f && fp == 0.0f && pp == 0.0f) return;
    const size_t window = p_.repeat_last_n < 0 ? history_.size() : size_t(p_.repeat_last_n);
    std::map<int32_t, int32_t> counts;
    for (size_t i = history_.size() - std::min(window, history_.size()); i < history_.size(); ++i)
      ++counts[history_[i]];
    for (const auto& [token, count] : counts) {
      float& x = l[size_t(token)];
      if (x == kNegInf) continue;
      if (rp != 1.0f) x = x > 0 ? x / rp : x * rp;
      x -= static_cast<float>(count) * fp + pp;
    }
  }

  SamplingParams p_;
  uint32_t n_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  std::vector<float> logits_;  // buffers reused across draws
  std::vector<int32_t> ids_;
};

// Logits with many exact ties (half steps), a share of -inf masks, and some whole masked
// stretches so that blocks of -inf occur; token `keep` stays unmasked.
std::vector<float> tricky_logits(uint32_t n, uint32_t seed, int32_t keep) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::uniform_int_distribution<int> pct(0, 99);
  std::vector<float> l(n);
  for (float& x : l) x = pct(rng) < 10 ? kNegInf : std::round(d(rng) * 2) / 2;
  for (uint32_t start = 0; start + 200 < n; start += 5000)
    std::fill(l.begin() + start, l.begin() + start + 130, kNegInf);
  if (n > 3) l[n / 3] = -0.0f;  // ties with +0.0
  if (l[size_t(keep)] == kNegInf) l[size_t(keep)] = 0.5f;
  return l;
}

// Biases of every kind on random tokens (never banning `keep`), a token biased twice, and
// a ban of the best raw token, so the override list both lowers and raises tokens.
std::vector<std::pair<int32_t, float>> tricky_bias(uint32_t n, uint32_t seed, int32_t keep, const std::vector<float>& l) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(n) - 1);
  std::uniform_real_distribution<float> bias(-20.0f, 20.0f);
  std::vector<std::pair<int32_t, float>> b;
  for (int i = 0; i < 12; ++i) {
    const int32_t t = token(rng);
    if (t == keep) continue;
    b.push_back({t, i % 4 == 0 ? -100.0f : i % 4 == 1 ? 1.5f : bias(rng)});
  }
  b.push_back({keep, 0.5f});
  b.push_back({keep, 2.0f});  // applied after the first, in order
  const auto best = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
  if (best != keep) b.push_back({best, -100.0f});
  return b;
}

struct Case {
  uint32_t n;
  float temperature;
  int32_t top_k;
  bool penalties;
  bool bias;
};

std::string describe(const Case& c) {
  return "n " + std::to_string(c.n) + " t " + std::to_string(c.temperature) + " k " + std::to_string(c.top_k) +
         (c.penalties ? " penalties" : "") + (c.bias ? " bias" : "");
}

void expect_same_tokens(const Case& c, int draws) {
  const auto keep = int32_t(c.n / 2);
  std::vector<std::vector<float>> logits;
  for (uint32_t s = 0; s < 3; ++s) logits.push_back(tricky_logits(c.n, 100 + s + c.n, keep));
  SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.seed = 77 + c.n;
  if (c.bias) p.logit_bias = tricky_bias(c.n, 5 + c.n, keep, logits[0]);
  if (c.penalties) {
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.7f;
    p.repeat_last_n = 48;
  }
  Sampler sampler(p, c.n);
  Reference reference(p, c.n);
  std::mt19937 rng(9);
  for (int i = 0; i < 30; ++i) {  // a prompt: some tokens many times
    const auto t = int32_t(rng() % std::min<uint32_t>(c.n, i % 2 ? 20 : c.n));
    sampler.accept(t);
    reference.accept(t);
  }
  for (int i = 0; i < draws; ++i) {
    const std::vector<float>& l = logits[size_t(i) % logits.size()];
    const int32_t want = reference.sample(l);
    const int32_t got = sampler.sample(l);
    ASSERT_EQ(got, want) << describe(c) << " draw " << i;
    sampler.accept(got);  // the penalties move with the generation
    reference.accept(got);
  }
}

TEST(SamplingSelect, InPlaceGreedyAndTopKMatchAFullCopyTokenForToken) {
  for (uint32_t n : {1u, 2u, 7u, 63u, 64u, 65u, 129u, 1000u}) {
    std::set<int32_t> ks;  // the in-place top-k serves 0 < k < n
    for (int32_t k : {1, 2, 40, int32_t(n) - 1})
      if (k > 0 && k < int32_t(n)) ks.insert(k);
    for (int mix = 0; mix < 4; ++mix) {
      const bool penalties = (mix & 1) != 0, bias = (mix & 2) != 0;
      expect_same_tokens({n, 0.0f, 40, penalties, bias}, 200);  // greedy: top_k plays no part
      for (float t : {0.8f, 1.7f})
        for (int32_t k : ks) expect_same_tokens({n, t, k, penalties, bias}, 200);
    }
  }
}

TEST(SamplingSelect, InPlaceGreedyAndTopKMatchAFullCopyOnARealVocab) {
  const uint32_t n = 151936;
  for (int mix = 0; mix < 4; ++mix) {
    const bool penalties = (mix & 1) != 0, bias = (mix & 2) != 0;
    expect_same_tokens({n, 0.0f, 40, penalties, bias}, 200);
    expect_same_tokens({n, 0.8f, 40, penalties, bias}, 200);
    expect_same_tokens({n, 1.7f, 1, penalties, bias}, 200);
  }
  // k = n - 1 takes the full copy (too large a heap to pay off), whose sort makes each draw
  // dear: a few draws show it agrees too.
  expect_same_tokens({n, 0.8f, int32_t(n) - 1, true, true}, 20);
}

TEST(SamplingSelect, TiesAcrossBlocksAndOverridesGoToTheLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> l(300, 0.0f);
  l[150] = 5.0f;
  l[250] = 5.0f;
  {
    Sampler s(p, 300);
    EXPECT_EQ(s.sample(l), 150);
  }
  p.logit_bias = {{10, 5.0f}, {280, 7.0f}, {280, -2.0f}};  // 10 ties 150; 280 ties after both
  {
    Sampler s(p, 300);
    EXPECT_EQ(s.sample(l), 10);
  }
  // Top-k sees the same ties: the 3 best are 10, 150, 250 (280 ties them but comes last).
  p.temperature = 1.0f;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p, 300);
  for (int i = 0; i < 300; ++i) {
    const int32_t t = s.sample(l);
    EXPECT_TRUE(t == 10 || t == 150 || t == 250) << t;
  }
}

TEST(SamplingSelectDeathTest, RefusesNaNAndInfinityWhereverTheyAre) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int32_t k : {0, 40}) {
    SamplingParams p;
    p.temperature = k == 0 ? 0.0f : 0.8f;
    p.top_k = k;
    p.logit_bias = {{3, 1.0f}, {700, -100.0f}};
    // the top-k's first k, a skipped block, a block with an override, the short tail
    for (size_t at : {size_t(3), size_t(20), size_t(500), size_t(700), size_t(1020)}) {
      for (float bad : {nan, inf, -nan}) {
        std::vector<float> l(1030, -1.0f);
        l[0] = 10.0f;  // so that later blocks are skippable
        l[at] = bad;
        Sampler s(p, 1030);
        EXPECT_DEATH(s.sample(l), "logits must be finite or -inf") << "k " << k << " at " << at;
      }
    }
    std::vector<float> masked(1030, kNegInf);
    masked[700] = 1.0f;  // banned by the bias
    Sampler s(p, 1030);
    EXPECT_DEATH(s.sample(masked), "every token is masked");
  }
}

}  // namespace
}  // namespace mt
