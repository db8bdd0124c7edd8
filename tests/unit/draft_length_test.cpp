// DraftLength (runtime/draft_length.h): the per-guess acceptance it estimates follows the
// drafts' real rate, unmeasured step costs are read off the measured ones' line, and the
// length it picks is the one with the most expected tokens per second: long drafts where
// a verification costs little more than a plain step, the shortest where each row costs a
// full step.
#include "runtime/draft_length.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace mt {
namespace {

// Steps of `len` guesses, each kept with probability p (given the ones before it).
void feed(DraftLength& d, int len, double p, double plain_s, double row_s, int steps, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  for (int s = 0; s < steps; ++s) {
    int kept = 0;
    while (kept < len && u(rng) < p) ++kept;
    d.observe(len, kept, plain_s + row_s * len);
  }
}

TEST(DraftLength, AcceptanceFollowsTheDraftsRate) {
  std::mt19937 rng(5);
  for (double p : {0.3, 0.7, 0.9}) {
    DraftLength d(1, 8);
    d.observe(0, 0, 1e-3);
    feed(d, 4, p, 1e-3, 1e-4, 400, rng);
    EXPECT_NEAR(d.acceptance(), p, 0.1) << p;
  }
}

TEST(DraftLength, UnmeasuredCostsComeFromTheLineThroughTheMeasuredOnes) {
  DraftLength d(1, 8);
  EXPECT_EQ(d.step_seconds(3), 0.0);
  EXPECT_EQ(d.choose(), 8);  // nothing measured: the longest
  EXPECT_EQ(d.gain(), 0.0);
  d.observe(0, 0, 2.0);      // 1 row
  EXPECT_EQ(d.step_seconds(5), 2.0);
  EXPECT_EQ(d.choose(), 8);  // one row count measured: still the longest
  EXPECT_EQ(d.gain(), 0.0);
  d.observe(4, 0, 6.0);      // 5 rows
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 4.0);
  EXPECT_DOUBLE_EQ(d.step_seconds(9), 10.0);
  d.observe(2, 0, 3.0);  // 3 rows measured: 1..3 and 3..5 are separate lines now
  EXPECT_DOUBLE_EQ(d.step_seconds(2), 2.5);
  EXPECT_DOUBLE_EQ(d.step_seconds(4), 4.5);
  EXPECT_DOUBLE_EQ(d.step_seconds(7), 9.0);  // beyond: the line through 3 and 5
  // Fewer than three samples: the least (a graph's capture is not a step's cost); then the
  // median of the last five.
  d.observe(2, 0, 7.0);
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 3.0);
  d.observe(2, 0, 4.0);
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 4.0);
  for (double s : {5.0, 5.0, 5.0}) d.observe(2, 0, s);  // 3.0 and 7.0 fall out of the last five
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 5.0);
}

TEST(DraftLength, PicksTheLengthWithTheMostTokensPerSecond) {
  std::mt19937 rng(9);
  // Each guess row costs a tenth of a plain step and guesses are kept at 0.9: long drafts.
  DraftLength cheap(1, 8);
  cheap.observe(0, 0, 1.0);
  feed(cheap, 8, 0.9, 1.0, 0.1, 60, rng);
  EXPECT_GE(cheap.choose(), 7);
  // Each row costs a whole plain step: nothing but the shortest draft can pay.
  DraftLength dear(1, 8);
  dear.observe(0, 0, 1.0);
  feed(dear, 8, 0.7, 1.0, 1.0, 60, rng);
  EXPECT_EQ(dear.choose(), 1);
  // In between, the choice is the argmax of expected tokens over step seconds.
  DraftLength mid(1, 8);
  mid.observe(0, 0, 2.73e-3);
  feed(mid, 4, 0.7, 2.73e-3, 0.78e-3, 200, rng);
  const double p = mid.acceptance();
  int best = 1;
  for (int len = 1; len <= 8; ++len) {
    if (DraftLength::expected_tokens(len, p) / mid.step_seconds(len + 1) >
        DraftLength::expected_tokens(best, p) / mid.step_seconds(best + 1)) {
      best = len;
    }
  }
  EXPECT_EQ(mid.choose(), best);
  EXPECT_GE(best, 2);
  EXPECT_LE(best, 4);
  // With a shortest length of 0 a plain step is a candidate too.
  DraftLength none(0, 4);
  none.observe(0, 0, 1.0);
  feed(none, 4, 0.1, 1.0, 1.0, 60, rng);
  EXPECT_EQ(none.choose(), 0);
}

// The gain is the best draft's expected rate over a plain step's, the rows' costs read off
// the line through the two measured row counts.
TEST(DraftLength, GainIsTheBestDraftsRateOverAPlainSteps) {
  DraftLength d(1, 8);
  d.observe(0, 0, 1.0);
  EXPECT_EQ(d.gain(), 0.0);  // no drafted step measured
  d.observe(8, 4, 1.8);      // one step: 4 kept, then a miss (the prior's 1 and 1 decayed by 0.95)
  const double p = (0.95 + 4) / (0.95 + 4 + 0.95 + 1);
  EXPECT_NEAR(d.acceptance(), p, 1e-12);
  double best = 0;
  for (int len = 1; len <= 8; ++len) best = std::max(best, DraftLength::expected_tokens(len, p) / (1.0 + 0.1 * len));
  EXPECT_NEAR(d.gain(), best, 1e-12);
  EXPECT_GT(d.gain(), 2.0);
}

// The throttle follows the model's verdict: the first two steps are plain; a gain under 1 +
// kMargin (after three drafted steps) turns drafting off for 8 steps, then a probe judged
// alone, 16 while it keeps losing; a paying gain keeps it on but for a plain step every
// kPlainEvery, every kPlainEverySure once the gain is at least kSureGain.
TEST(DraftLength, ThrottleTurnsDraftingOffWhileTheModelSaysItDoesNotPay) {
  SpecThrottle t;
  for (uint64_t s = 0; s < SpecThrottle::kPlainFirst; ++s) {
    EXPECT_FALSE(t.draft(s));
    t.observe(s, 0, 0.0);
  }
  static_assert(SpecThrottle::kPlainFirst == 2);
  for (uint64_t s = 2; s <= 4; ++s) {
    EXPECT_TRUE(t.draft(s)) << s;
    t.observe(s, 1, 1.0 + SpecThrottle::kMargin / 2);  // break-even is not enough
  }
  for (uint64_t s = 5; s < 13; ++s) {
    EXPECT_FALSE(t.draft(s)) << s;
    t.observe(s, 0, 0.0);
  }
  EXPECT_EQ(t.off_steps(), 8u);
  EXPECT_TRUE(t.draft(13));  // the probe, judged on its one step: 16 plain steps
  t.observe(13, 1, 0.8);
  for (uint64_t s = 14; s < 30; ++s) {
    EXPECT_FALSE(t.draft(s)) << s;
    t.observe(s, 0, 0.0);
  }
  EXPECT_EQ(t.off_steps(), 8u + 16u);
  EXPECT_TRUE(t.draft(30));
  t.observe(30, 1, 1.1);  // paying, not by much: a plain step every kPlainEvery
  int drafted = 0;
  for (uint64_t s = 32; s < 32 + 4 * SpecThrottle::kPlainEvery; ++s) {
    const bool d = t.draft(s);
    drafted += d;
    EXPECT_EQ(d, s % SpecThrottle::kPlainEvery != 0) << s;
    t.observe(s, d ? 4 : 0, d ? 1.1 : 0.0);
  }
  EXPECT_EQ(drafted, 4 * (SpecThrottle::kPlainEvery - 1));
  EXPECT_EQ(t.off_steps(), 8u + 16u);
  // Paying by far (>= kSureGain): a plain step only every kPlainEverySure.
  const uint64_t from = 32 + 4 * SpecThrottle::kPlainEvery;
  drafted = 0;
  for (uint64_t s = from; s < from + 2 * SpecThrottle::kPlainEverySure; ++s) {
    const bool d = t.draft(s);
    drafted += d;
    t.observe(s, d ? 4 : 0, d ? 1.5 : 0.0);
  }
  EXPECT_GE(drafted, 2 * (SpecThrottle::kPlainEverySure - 1) - 1) << "one step at kPlainEvery before the verdict moved";
  EXPECT_EQ(t.off_steps(), 8u + 16u);
}

// DraftPolicy over a simulated decode of 2,000 tokens (steps cost plain + row x guesses,
// each +-3% noise, the first step ten plain steps (a graph's capture) and one step in 40 three
// (a cold cache); guesses kept with probability p): where drafting cannot pay it costs
// at most 2% against plain steps (the exploration and the probes), and where it pays the
// rate is within 10% of the best fixed length's.
TEST(DraftLength, PolicyNeverLosesAndFindsTheBestLength) {
  struct Case {
    double p, row;  // acceptance; a guess row's cost in plain steps
    bool pays;
  };
  // 0.3 / 0.3: one guess is break-even; 0.3 / 0.6: every length loses; 0.7 / 0.285: the
  // H100's measured 0.78 ms per row over a 2.73 ms step; 0.9 / 0.1: long drafts.
  for (const Case c : {Case{0.3, 0.3, false}, Case{0.3, 0.6, false}, Case{0.7, 0.285, true}, Case{0.9, 0.1, true},
                       Case{0.5, 1.0, false}}) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<double> u(0, 1);
    const double plain_rate = 1 / (1 + 2.0 / 40);  // plain decoding meets the same spikes (1 token a unit else)
    DraftPolicy policy(1, 8, true, true);
    double seconds = 0;
    int tokens = 0;
    uint64_t step = 0;
    while (tokens < 2000) {
      const int len = policy.next(step);
      int kept = 0;
      while (kept < len && u(rng) < c.p) ++kept;
      const double spike = step == 0 ? 10.0 : u(rng) < 1.0 / 40 ? 3.0 : 1.0;
      const double s = (1.0 + c.row * len) * (0.97 + 0.06 * u(rng)) * spike;
      policy.observe(step++, len, kept, s);
      seconds += s;
      tokens += kept + 1;
    }
    const double speedup = tokens / seconds / plain_rate;
    double best = 1;
    for (int len = 1; len <= 8; ++len) best = std::max(best, DraftLength::expected_tokens(len, c.p) / (1 + c.row * len));
    EXPECT_GE(speedup, 0.98) << "p " << c.p << " row " << c.row;
    if (c.pays) {
      EXPECT_GE(speedup, 0.9 * best) << "p " << c.p << " row " << c.row << " best " << best;
    } else {
      EXPECT_GT(policy.throttle().off_steps(), 0u) << "p " << c.p << " row " << c.row;
    }
  }
}

// A step that did a one-time set-up (Backend::setups grew: a graph captured for a new row
// count) counts its acceptance but not its time: the length it drafted keeps its measured
// cost, and a row count whose only step was a set-up stays unmeasured (read off the line)
// instead of standing at the capture's cost and being avoided.
TEST(DraftLength, ASetUpStepsTimeIsNoCost) {
  DraftPolicy policy(1, 4, true, true);
  policy.observe(0, 0, 0, 50e-3);  // the first step: the sequence's set-up
  policy.observe(1, 0, 0, 2.7e-3);
  EXPECT_NEAR(policy.length().step_seconds(1), 2.7e-3, 1e-9);
  policy.observe(2, 4, 3, 60e-3, /*set_up=*/true);  // 5 rows, with their graph's capture
  EXPECT_EQ(policy.length().step_seconds(5), policy.length().step_seconds(1)) << "5 rows still unmeasured (flat line)";
  const double before = policy.length().acceptance();
  policy.observe(3, 4, 4, 4.5e-3);
  EXPECT_NEAR(policy.length().step_seconds(5), 4.5e-3, 1e-9);
  EXPECT_GT(policy.length().acceptance(), before);
  policy.observe(4, 2, 0, 40e-3, /*set_up=*/true);  // 3 rows' first step, a capture
  policy.observe(5, 2, 2, 3.5e-3);
  policy.observe(6, 2, 2, 3.6e-3);
  EXPECT_NEAR(policy.length().step_seconds(3), 3.5e-3, 1e-9) << "the least of two samples, the capture not among them";
  EXPECT_EQ(policy.next(7), 4) << "long drafts pay at these costs";
}

// Step costs whose line bends: 5 rows dear, 4 rows cheap. The long first draft and the line
// through 1 and 5 rows lead to 2 guesses, and the line through 1, 3 and 5 rows keeps it
// there (4 rows read as 2.1); the probes of the best's neighbours measure 4 rows (1.7) and
// the policy moves to 3 guesses, the best rate at p 0.7.
TEST(DraftLength, ProbesOfTheBestsNeighboursFindWhereTheLineBends) {
  const double cost[] = {0, 1.0, 1.3, 1.6, 1.7, 2.6};  // by rows
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  DraftPolicy policy(1, 4, true, true);
  int by_length[5] = {};
  for (uint64_t step = 0; step < 400; ++step) {
    const int len = policy.next(step);
    int kept = 0;
    while (kept < len && u(rng) < 0.7) ++kept;
    policy.observe(step, len, kept, cost[len + 1]);
    if (step >= 300) ++by_length[len];
  }
  EXPECT_DOUBLE_EQ(policy.length().step_seconds(4), 1.7) << "4 rows measured";
  EXPECT_GT(by_length[3], 80) << by_length[0] << " " << by_length[1] << " " << by_length[2] << " " << by_length[3] << " "
                              << by_length[4];
  EXPECT_GE(by_length[2] + by_length[4], 2) << "the neighbours still probed now and then";
}

// A policy started from another's costs drafts from its first step at the length those
// costs favour, with the same cost estimates and its own (prior) acceptance.
TEST(DraftLength, AWarmStartTakesTheCostsNotTheAcceptance) {
  DraftPolicy first(1, 4, true, true);
  const double cost[] = {0, 2.7e-3, 3.2e-3, 3.6e-3, 4.1e-3, 6.0e-3};
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> u(0, 1);
  for (uint64_t step = 0; step < 200; ++step) {
    const int len = first.next(step);
    int kept = 0;
    while (kept < len && u(rng) < 0.9) ++kept;
    first.observe(step, len, kept, cost[len + 1]);
  }
  DraftPolicy second(1, 4, true, true);
  EXPECT_EQ(second.next(0), 0) << "cold: plain steps first";
  second.warm_start(first);
  for (int rows = 1; rows <= 5; ++rows) EXPECT_EQ(second.length().step_seconds(rows), first.length().step_seconds(rows));
  EXPECT_DOUBLE_EQ(second.length().acceptance(), 0.5);
  EXPECT_GT(first.length().acceptance(), 0.8);
  EXPECT_EQ(second.next(0), second.length().choose());
  EXPECT_GE(second.next(0), 1) << "warm: drafting from the first step";
}

TEST(DraftLength, ExpectedTokensOfAGeometricRun) {
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(0, 0.7), 1.0);
  EXPECT_NEAR(DraftLength::expected_tokens(4, 0.7), 1 + 0.7 + 0.49 + 0.343 + 0.2401, 1e-12);
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(4, 1.0), 5.0);
}

}  // namespace
}  // namespace mt
