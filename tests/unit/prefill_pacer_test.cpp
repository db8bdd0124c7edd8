// PrefillPacer (server/prefill_pacer.h): the prompt budget beside decoders converges to the
// chunk that keeps a step at `ratio` x a decode step, on a step cost with a fixed part.
#include "server/prefill_pacer.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

TEST(PrefillPacer, FullChunkWithoutDecodersMinChunkUntilMeasured) {
  PrefillPacer p({.max_chunk = 256, .min_chunk = 16, .ratio = 2.0});
  EXPECT_EQ(p.budget(false), 256u);
  EXPECT_EQ(p.budget(true), 16u);
  p.observe(4, 0, 0.010);  // a decode step alone: still no marginal cost
  EXPECT_EQ(p.budget(true), 16u);
  p.observe(0, 64, 0.050);  // a prompt-only step tells nothing of the marginal cost
  EXPECT_EQ(p.budget(true), 16u);
  EXPECT_EQ(p.prompt_token_s(), 0);
}

// Steps cost d + a + b * n with prompt tokens (d: the decoders', a: a prompt's fixed part).
// The fixed point of n' = (ratio - 1) * d / ((a + b n) / n) is a + b n = (ratio - 1) d.
TEST(PrefillPacer, ConvergesToTheRatioOnAStepWithAFixedCost) {
  const double d = 0.005, a = 0.001, b = 0.00004;  // (2 - 1) * d = a + b n  ->  n = 100
  PrefillPacer p({.max_chunk = 512, .min_chunk = 8, .ratio = 2.0, .alpha = 0.5});
  p.observe(8, 0, d);
  uint32_t n = p.budget(true);
  for (int step = 0; step < 60; ++step) {
    p.observe(8, n, d + a + b * n);
    p.observe(8, 0, d);
    n = p.budget(true);
  }
  EXPECT_NEAR(static_cast<double>(n), 100.0, 3.0);
  EXPECT_NEAR(d + a + b * n, 2.0 * d, 0.0002);
  EXPECT_EQ(p.budget(false), 512u);
}

TEST(PrefillPacer, ClampedAndOff) {
  PrefillPacer slow({.max_chunk = 256, .min_chunk = 16, .ratio = 3.0});
  slow.observe(2, 0, 0.001);
  slow.observe(2, 16, 0.101);  // 6 ms per prompt token: the formula says 0
  EXPECT_EQ(slow.budget(true), 16u);
  PrefillPacer fast({.max_chunk = 256, .min_chunk = 16, .ratio = 3.0});
  fast.observe(2, 0, 0.010);
  fast.observe(2, 16, 0.0101);  // nearly free prompt tokens
  EXPECT_EQ(fast.budget(true), 256u);
  PrefillPacer off({.max_chunk = 128, .min_chunk = 16, .ratio = 0});
  off.observe(2, 0, 0.010);
  off.observe(2, 128, 1.0);
  EXPECT_EQ(off.budget(true), 128u);
  fast.observe(2, 16, -1.0);  // a bad clock reading is ignored
  EXPECT_EQ(fast.budget(true), 256u);
}

}  // namespace
}  // namespace mt
