// The sampler and the stop matcher: greedy and tie rules, seeded reproducibility, empirical
// frequencies against the softmax, the top-p / min-p sets, penalties worked by hand,
// parameter validation, and stop strings across streamed pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/row_argmax.h"
#include "runtime/sampling.h"

namespace mt {
namespace {

// No filters, temperature 1: draws follow the softmax of the logits.
SamplingParams plain(uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

SamplingParams greedy() {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  return p;
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  // normal_distribution's values are implementation-defined; no test depends on them.
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Logits whose softmax at temperature 1 is exactly proportional to `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(s.sample(logits))] += 1.0 / draws;
  return f;
}

TEST(Sampling, GreedyIsArgmaxAndTiesGoToTheLowestId) {
  const std::vector<float> logits = random_logits(1000, 7);
  Sampler s(greedy(), 1000);
  EXPECT_EQ(s.sample(logits), argmax(logits));

  Sampler six(greedy(), 6);
  EXPECT_EQ(six.sample(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f, 2.0f, 1.0f}), 1);
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(six.sample(std::vector<float>{ninf, ninf, -50.0f, ninf, -50.0f, ninf}), 2);
}

// row_argmax (core/row_argmax.h) is what a greedy sampler without bias or penalties picks
// (picks_argmax: callers then ask the backend for the argmax alone), on random rows and on
// ties, -0 beside +0 and masked tokens (NaN: the sampler refuses it, row_argmax skips it);
// any bias, penalty or temperature turns it off.
TEST(Sampling, PicksArgmaxExactlyWhenSampleIsTheRowArgmax) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler s(greedy, 1000);
  EXPECT_TRUE(s.picks_argmax());
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> row(1000);
    for (float& v : row) v = trial % 5 == 0 ? std::round(dist(rng)) : dist(rng);  // rounded: many ties
    if (trial % 3 == 2) std::fill(row.begin(), row.begin() + 500, -inf);
    if (trial == 10) std::fill(row.begin(), row.end(), 0.0f), row[0] = -0.0f;
    EXPECT_EQ(s.sample(row), row_argmax(row)) << "trial " << trial;
  }
  std::vector<float> masked(4, -inf);
  EXPECT_EQ(row_argmax(masked), -1);
  masked[3] = nan;
  EXPECT_EQ(row_argmax(masked), -1);
  EXPECT_EQ(row_argmax(std::vector<float>{nan, -1.0f, nan, 2.0f, nan}), 3);
  std::vector<float> ties = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(row_argmax(ties), 1);

  SamplingParams p = greedy;
  p.logit_bias = {{1, 0.5f}};
  EXPECT_FALSE(Sampler(p, 1000).picks_argmax());
  for (int which = 0; which < 4; ++which) {
    p = greedy;
    if (which == 0) p.repeat_penalty = 1.1f;
    if (which == 1) p.presence_penalty = 0.5f;
    if (which == 2) p.frequency_penalty = 0.5f;
    if (which == 3) p.temperature = 0.5f;
    EXPECT_FALSE(Sampler(p, 1000).picks_argmax()) << which;
  }
  std::vector<int32_t> ids;
  const std::vector<float> two_rows = {1.0f, 2.0f, 0.0f, -inf, -inf, -inf};
  EXPECT_TRUE(argmax_rows(two_rows, 1, &ids).ok());  // one row of six
  EXPECT_EQ(ids, std::vector<int32_t>{1});
  const Status st = argmax_rows(two_rows, 2, &ids);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();  // the second row is all -inf
}

TEST(Sampling, TopKOneIsGreedyAtAnyTemperature) {
  for (float t : {0.01f, 0.5f, 1.0f, 3.0f, 100.0f}) {
    SamplingParams p = plain(123);
    p.temperature = t;
    p.top_k = 1;
    Sampler s(p, 5000);
    for (uint32_t trial = 0; trial < 20; ++trial) {
      std::vector<float> logits = random_logits(5000, trial);
      EXPECT_EQ(s.sample(logits), argmax(logits)) << "temperature " << t;
      const float best = logits[static_cast<size_t>(argmax(logits))];
      logits[17] = logits[4000] = best;  // a three-way tie: the lowest id wins
      EXPECT_EQ(s.sample(logits), argmax(logits)) << "temperature " << t;
    }
  }
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<float> logits(16, 0.0f);  // uniform: every draw is informative
  auto run = [&](uint64_t seed) {
    Sampler s(plain(seed), 16);
    std::vector<int32_t> out;
    for (int i = 0; i < 1000; ++i) out.push_back(s.sample(logits));
    return out;
  };
  const std::vector<int32_t> a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
  EXPECT_EQ(std::set<int32_t>(a.begin(), a.end()).size(), 16u);
}

TEST(Sampling, DrawIsTheInverseCdfOfMt19937_64Top53Bits) {
  // The documented contract that makes draws identical across standard libraries: one
  // std::mt19937_64 output per draw, u = (x >> 11) * 2^-53, the first token (in id order,
  // with no filter) whose cumulative probability exceeds u.
  const std::vector<float> logits = {0.3f, -1.0f, 1.2f, 0.0f, 0.7f, -0.4f};
  std::vector<double> cdf;
  double z = 0;
  for (float l : logits) cdf.push_back(z += std::exp(static_cast<double>(l - 1.2f)));
  for (double& c : cdf) c /= z;
  const uint64_t seed = 0x5eed;
  Sampler s(plain(seed), 6);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const int32_t got = s.sample(logits);
    const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
    const bool near_edge = std::any_of(cdf.begin(), cdf.end(),
                                       [&](double c) { return std::abs(c - u) < 1e-6; });
    if (near_edge) continue;  // float weights vs the double reference
    EXPECT_EQ(got, static_cast<int32_t>(it - cdf.begin())) << "draw " << i << " u " << u;
    ++checked;
  }
  EXPECT_GT(checked, 1990);
}

TEST(Sampling, SeedZeroPicksARandomSeedThatReplays) {
  const std::vector<float> logits = random_logits(100, 3);
  Sampler random(plain(0), 100);
  ASSERT_NE(random.seed(), 0u);
  Sampler replay(plain(random.seed()), 100);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(random.sample(logits), replay.sample(logits));
}

TEST(Sampling, ResetReplaysTheSameTokens) {
  SamplingParams p = plain(9);
  p.repeat_penalty = 1.3f;
  const std::vector<float> logits = random_logits(50, 4);
  Sampler s(p, 50);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 100; ++i) s.accept(first.emplace_back(s.sample(logits)));
  s.reset();
  for (int i = 0; i < 100; ++i) s.accept(second.emplace_back(s.sample(logits)));
  EXPECT_EQ(first, second);
}

TEST(Sampling, FrequenciesMatchTheSoftmaxAtTemperatureOne) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  std::vector<double> expected;
  for (float l : logits) expected.push_back(std::exp(static_cast<double>(l)));
  const double z = std::accumulate(expected.begin(), expected.end(), 0.0);
  Sampler s(plain(2024), 4);
  const std::vector<double> f = frequencies(s, logits, 20000);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], expected[i] / z, 0.02) << "token " << i;
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  for (float t : {0.5f, 2.0f}) {
    SamplingParams p = plain(5);
    p.temperature = t;
    Sampler s(p, 2);
    const double p0 = 1.0 / (1.0 + std::exp(-1.0 / t));
    EXPECT_NEAR(frequencies(s, logits, 20000)[0], p0, 0.02) << "temperature " << t;
  }
}

TEST(Sampling, TopPNeverLeavesTheNucleus) {
  // Sorted mass: 0.30, 0.55 -> the nucleus for 0.5 is {token 3, token 1}.
  const std::vector<float> logits = logits_of({0.15, 0.25, 0.1, 0.3, 0.2});
  SamplingParams p = plain(77);
  p.top_p = 0.5f;
  Sampler s(p, 5);
  const std::vector<double> f = frequencies(s, logits, 5000);
  EXPECT_EQ(f[0] + f[2] + f[4], 0.0);
  EXPECT_NEAR(f[3], 0.3 / 0.55, 0.03);  // renormalised inside the nucleus
  EXPECT_NEAR(f[1], 0.25 / 0.55, 0.03);
}

TEST(Sampling, TopPOnALargeFlatVocabStaysInTheNucleus) {
  // 150k logits: a nucleus of thousands of tokens, found by the radix select.
  const uint32_t n = 150000;
  const std::vector<float> logits = random_logits(n, 11);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la > lb || (la == lb && a < b);
  });
  double z = 0, mass = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l - logits[size_t(order[0])]));
  std::set<int32_t> nucleus;
  for (int32_t id : order) {
    nucleus.insert(id);
    mass += std::exp(static_cast<double>(logits[size_t(id)] - logits[size_t(order[0])]));
    if (mass >= 0.9001 * z) break;  // a hair of slack for float vs double sums
  }
  ASSERT_GT(nucleus.size(), 1000u);
  SamplingParams p = plain(3);
  p.top_p = 0.9f;
  Sampler s(p, n);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(nucleus.count(s.sample(logits)));
}

TEST(Sampling, TopPOnALargeVocabKeepsHeavyTokensAndBreaksTiesById) {
  // Three heavy tokens at the end of the vocab hold 0.3, 0.2, 0.1 of the mass; the rest is
  // flat (logit 0). top_p 0.9 keeps the heavy three and the flat tokens with the lowest ids
  // up to another 0.3 of the mass, i.e. the first 0.75 of the flat ones.
  const uint32_t n = 10000, flat = n - 3;
  const double z = flat / 0.4;
  std::vector<float> logits(n, 0.0f);
  for (uint32_t i = 0; i < 3; ++i)
    logits[flat + i] = static_cast<float>(std::log((0.3 - 0.1 * i) * z));
  SamplingParams p = plain(17);
  p.top_p = 0.9f;
  Sampler s(p, n);
  const int draws = 2000;
  std::vector<double> heavy(3, 0.0);
  int32_t max_flat = -1;
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.sample(logits);
    if (t >= static_cast<int32_t>(flat)) heavy[size_t(t) - flat] += 1.0 / draws;
    else max_flat = std::max(max_flat, t);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(heavy[i], (0.3 - 0.1 * i) / 0.9, 0.04) << i;
  EXPECT_LE(max_flat, static_cast<int32_t>(0.75 * flat) + 2);
  EXPECT_GT(max_flat, static_cast<int32_t>(0.74 * flat));
}

TEST(Sampling, MinPDropsTokensBelowMinPTimesTheMax) {
  // max 0.5, min_p 0.25 -> threshold 0.125: tokens 1 (0.1) and 4 (0.05) are out.
  const std::vector<float> logits = logits_of({0.5, 0.1, 0.2, 0.15, 0.05});
  SamplingParams p = plain(8);
  p.min_p = 0.25f;
  Sampler s(p, 5);
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_EQ(f[1] + f[4], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.85, 0.02);
  EXPECT_NEAR(f[2], 0.2 / 0.85, 0.02);
  EXPECT_NEAR(f[3], 0.15 / 0.85, 0.02);
}

TEST(Sampling, TopPIsMeasuredBeforeMinPCuts) {
  // min_p 0.5 drops token 2 (0.2 / 0.5 < 0.5). top_p 0.55 over the full distribution needs
  // tokens 0 and 1 (0.5, then 0.8); measured after min-p's renormalisation it would stop at
  // token 0 (0.625). With top_k = 3 the extra token 3 is cut first and the sorted path runs.
  const std::vector<float> logits = logits_of({0.5, 0.3, 0.2, 1e-9});
  for (int32_t k : {0, 3}) {
    SamplingParams p = plain(31);
    p.top_k = k;
    p.top_p = 0.55f;
    p.min_p = 0.5f;
    Sampler s(p, 4);
    const std::vector<double> f = frequencies(s, logits, 20000);
    EXPECT_EQ(f[2] + f[3], 0.0) << "top_k " << k;
    EXPECT_NEAR(f[1], 0.3 / 0.8, 0.02) << "top_k " << k;
  }
}

TEST(Sampling, TopKOnALargeVocabStaysInTheTopK) {
  const uint32_t n = 150000;
  const std::vector<float> logits = random_logits(n, 12);
  std::vector<float> sorted = logits;
  for (int32_t k : {40, 3000}) {  // heap selection, then nth_element
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
    const float kth = sorted[size_t(k - 1)];
    SamplingParams p = plain(13);
    p.top_k = k;
    p.temperature = 50.0f;  // nearly flat: the whole top k gets drawn from
    Sampler s(p, n);
    std::set<int32_t> seen;
    for (int i = 0; i < 100; ++i) {
      const int32_t t = s.sample(logits);
      EXPECT_GE(logits[size_t(t)], kth) << "k " << k;
      seen.insert(t);
    }
    EXPECT_GT(seen.size(), 25u) << "k " << k;
  }
}

TEST(Sampling, TopKKeepsTheKBestRenormalised) {
  const std::vector<float> logits = logits_of({0.1, 0.4, 0.05, 0.3, 0.15});
  SamplingParams p = plain(21);
  p.top_k = 2;
  Sampler s(p, 5);
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_EQ(f[0] + f[2] + f[4], 0.0);
  EXPECT_NEAR(f[1], 0.4 / 0.7, 0.02);
}

TEST(Sampling, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = greedy();
  p.repeat_penalty = 1.5f;
  {
    Sampler s(p, 4);  // 2.0 / 1.5 = 1.33 < 1.8
    const std::vector<float> logits = {2.0f, 1.8f, -0.5f, -0.4f};
    EXPECT_EQ(s.sample(logits), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(logits), 1);
  }
  {
    Sampler s(p, 2);  // -1.0 * 1.5 = -1.5 < -1.2 (dividing would give -0.67 and keep token 0)
    const std::vector<float> logits = {-1.0f, -1.2f};
    s.accept(0);
    EXPECT_EQ(s.sample(logits), 1);
  }
}

TEST(Sampling, RepeatPenaltySeesOnlyTheWindow) {
  SamplingParams p = greedy();
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 2;
  const std::vector<float> logits = {2.0f, 1.8f, 0.0f, 0.0f};
  Sampler s(p, 4);
  s.accept(0);
  s.accept(2);
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(3);  // token 0 leaves the window
  EXPECT_EQ(s.sample(logits), 0);

  p.repeat_last_n = 0;
  Sampler off(p, 4);
  off.accept(0);
  EXPECT_EQ(off.sample(logits), 0);

  p.repeat_last_n = -1;  // the whole history
  Sampler all(p, 4);
  all.accept(0);
  for (int i = 0; i < 1000; ++i) all.accept(2 + i % 2);
  EXPECT_EQ(all.sample(logits), 1);
  all.reset();
  EXPECT_EQ(all.sample(logits), 0);
}

TEST(Sampling, PresencePenaltyIsSubtractedOnce) {
  SamplingParams p = greedy();
  p.presence_penalty = 0.3f;
  Sampler once(p, 2);
  once.accept(0);
  EXPECT_EQ(once.sample(std::vector<float>{1.0f, 0.8f}), 1);  // 0.7 < 0.8
  Sampler thrice(p, 2);
  for (int i = 0; i < 3; ++i) thrice.accept(0);
  EXPECT_EQ(thrice.sample(std::vector<float>{1.0f, 0.6f}), 0);  // still 0.7, not 0.1
}

TEST(Sampling, FrequencyPenaltyIsCountTimesF) {
  const std::vector<float> logits = {1.0f, 0.5f};
  // Token 0 seen twice: 1.0 - 2f against 0.5; at f = 0.25 they tie and id 0 wins.
  for (auto [f, want] : {std::pair{0.24f, 0}, std::pair{0.25f, 0}, std::pair{0.26f, 1}}) {
    SamplingParams p = greedy();
    p.frequency_penalty = f;
    Sampler s(p, 2);
    s.accept(0);
    s.accept(0);
    EXPECT_EQ(s.sample(logits), want) << "f = " << f;
  }
  // Token 1 seen three times at f = 0.2: 1.0 - 0.6 = 0.4 < 0.5 (once would leave 0.8).
  SamplingParams p = greedy();
  p.frequency_penalty = 0.2f;
  Sampler s(p, 2);
  for (int i = 0; i < 3; ++i) s.accept(1);
  EXPECT_EQ(s.sample(std::vector<float>{0.5f, 1.0f}), 0);
}

TEST(Sampling, RepeatPenaltyComesBeforePresenceAndFrequency) {
  SamplingParams p = greedy();
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.1f;
  p.presence_penalty = 0.1f;
  Sampler s(p, 2);
  s.accept(0);
  s.accept(0);
  // 2.0 / 2 - 2 * 0.1 - 0.1 = 0.7 < 0.8; the other order would give (2.0 - 0.3) / 2 = 0.85.
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 0.8f}), 1);
}

TEST(Sampling, MaskedTokensAreNeverDrawn) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> logits(8, 0.0f);
  for (size_t i = 0; i < 8; i += 2) logits[i] = ninf;
  SamplingParams p = plain(6);
  p.presence_penalty = -5.0f;  // a negative penalty must not unmask
  Sampler s(p, 8);
  s.accept(0);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(s.sample(logits) % 2, 1);
}

TEST(Sampling, ValidateNamesTheBadField) {
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  EXPECT_TRUE(validate(greedy()).ok());
  auto fails_on = [](std::string field, auto mutate) {
    SamplingParams p;
    mutate(p);
    const Status st = validate(p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  fails_on("temperature", [](SamplingParams& p) { p.temperature = -0.1f; });
  fails_on("temperature", [&](SamplingParams& p) { p.temperature = nan; });
  fails_on("temperature", [&](SamplingParams& p) { p.temperature = inf; });
  fails_on("top_k", [](SamplingParams& p) { p.top_k = -1; });
  fails_on("top_p", [](SamplingParams& p) { p.top_p = 0.0f; });
  fails_on("top_p", [](SamplingParams& p) { p.top_p = 1.01f; });
  fails_on("top_p", [&](SamplingParams& p) { p.top_p = nan; });
  fails_on("min_p", [](SamplingParams& p) { p.min_p = -0.01f; });
  fails_on("min_p", [](SamplingParams& p) { p.min_p = 1.5f; });
  fails_on("repeat_penalty", [](SamplingParams& p) { p.repeat_penalty = 0.0f; });
  fails_on("repeat_penalty", [](SamplingParams& p) { p.repeat_penalty = -1.0f; });
  fails_on("repeat_last_n", [](SamplingParams& p) { p.repeat_last_n = -2; });
  fails_on("presence_penalty", [&](SamplingParams& p) { p.presence_penalty = nan; });
  fails_on("frequency_penalty", [&](SamplingParams& p) { p.frequency_penalty = inf; });

  SamplingParams edge;
  edge.top_p = 1.0f;
  edge.min_p = 1.0f;
  edge.repeat_last_n = -1;
  edge.presence_penalty = -2.0f;
  EXPECT_TRUE(validate(edge).ok());
}

// Feeds pieces, collecting everything emitted; returns (text, stopped).
std::pair<std::string, bool> run_stops(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) {
    StopMatcher::Result r = m.push(piece);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopMatcher, CatchesAStopSplitAcrossPieces) {
  StopMatcher m({"<|im_end|>"});
  StopMatcher::Result r = m.push("Hello <|im");
  EXPECT_EQ(r.emit, "Hello ");
  EXPECT_FALSE(r.stopped);
  r = m.push("_en");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = m.push("d|> trailing");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_TRUE(m.stopped());
  EXPECT_TRUE(m.push("more").stopped);
  EXPECT_EQ(m.push("more").emit, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EmitsTextBeforeAStopInsideOnePiece) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(run_stops(m, {"abc", "deSTOPfg"}), (std::pair<std::string, bool>{"abcde", true}));
}

TEST(StopMatcher, HeldPrefixIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"</s>"});
  StopMatcher::Result r = m.push("a</");
  EXPECT_EQ(r.emit, "a");
  r = m.push("b");
  EXPECT_EQ(r.emit, "</b");
  EXPECT_FALSE(r.stopped);
  // A new partial starts inside the released text: "x<" holds "<" only.
  r = m.push("x<");
  EXPECT_EQ(r.emit, "x");
  EXPECT_EQ(m.flush(), "<");
}

TEST(StopMatcher, OverlappingPartialsKeepTheEarliestCandidate) {
  // "aab": after "aa" both "a" suffixes could start the stop; the stop starts at the second.
  StopMatcher m({"aab"});
  EXPECT_EQ(run_stops(m, {"xa", "a", "a", "b"}), (std::pair<std::string, bool>{"xa", true}));
}

TEST(StopMatcher, MultipleStopStringsEarliestMatchWins) {
  StopMatcher m({"World", "lo W", "\n\n"});
  EXPECT_EQ(run_stops(m, {"Hel", "lo Wor", "ld"}), (std::pair<std::string, bool>{"Hel", true}));
  StopMatcher n({"User:", "\n\n"});
  EXPECT_EQ(run_stops(n, {"one\n", "\nUser:"}), (std::pair<std::string, bool>{"one", true}));
  StopMatcher longest({"abcdef", "cd"});
  StopMatcher::Result r = longest.push("abc");  // "abc" could start "abcdef": all held
  EXPECT_EQ(r.emit, "");
  r = longest.push("dX");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "ab");
}

TEST(StopMatcher, FlushReturnsTheHeldTailAtTheEnd) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.push("answer #").emit, "answer ");
  EXPECT_EQ(m.push("#").emit, "");
  EXPECT_EQ(m.flush(), "##");
  EXPECT_EQ(m.flush(), "");
  StopMatcher none({});
  EXPECT_EQ(run_stops(none, {"a", "b"}), (std::pair<std::string, bool>{"ab", false}));
  StopMatcher empty_ignored({""});
  EXPECT_EQ(run_stops(empty_ignored, {"a", "b"}), (std::pair<std::string, bool>{"ab", false}));
}

}  // namespace
}  // namespace mt
