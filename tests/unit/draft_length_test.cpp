// DraftLength (runtime/draft_length.h): the per-guess acceptance it estimates follows the
// drafts' real rate, unmeasured step costs are read off the measured ones' line, and the
// length it picks is the one with the most expected tokens per second: long drafts where
// a verification costs little more than a plain step, the shortest where each row costs a
// full step.
#include "runtime/draft_length.h"

#include <gtest/gtest.h>

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
  d.observe(0, 0, 2.0);      // 1 row
  EXPECT_EQ(d.step_seconds(5), 2.0);
  EXPECT_EQ(d.choose(), 8);  // one row count measured: still the longest
  d.observe(4, 0, 6.0);      // 5 rows
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 4.0);
  EXPECT_DOUBLE_EQ(d.step_seconds(9), 10.0);
  d.observe(2, 0, 3.0);  // 3 rows measured: 1..3 and 3..5 are separate lines now
  EXPECT_DOUBLE_EQ(d.step_seconds(2), 2.5);
  EXPECT_DOUBLE_EQ(d.step_seconds(4), 4.5);
  EXPECT_DOUBLE_EQ(d.step_seconds(7), 9.0);  // beyond: the line through 3 and 5
  // A moving average: a new step moves the figure a quarter of the way.
  d.observe(2, 0, 7.0);
  EXPECT_DOUBLE_EQ(d.step_seconds(3), 4.0);
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

TEST(DraftLength, ExpectedTokensOfAGeometricRun) {
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(0, 0.7), 1.0);
  EXPECT_NEAR(DraftLength::expected_tokens(4, 0.7), 1 + 0.7 + 0.49 + 0.343 + 0.2401, 1e-12);
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(4, 1.0), 5.0);
}

}  // namespace
}  // namespace mt
