// The learned CPU cost of the split of misses (experts/cost_fit.h).
#include "experts/cost_fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "experts/scheduler.h"

namespace mt {
namespace {

constexpr uint64_t kExpert = 2'860'000;  // bytes of a qwen3-30b-a3b q4_k_m expert

TEST(CostFit, RecoversTheFixedPartAndTheSpeedOfALine) {
  CostFit fit;
  EXPECT_FALSE(fit.ready());
  // 100 us per layer-step + 80 GB/s, over 4..40 experts a step.
  for (int i = 0; i < 200; ++i) {
    const uint64_t bytes = (4 + i % 37) * kExpert;
    fit.add(bytes, 100e-6 + static_cast<double>(bytes) / 80e9);
  }
  ASSERT_TRUE(fit.ready());
  const LineCost c = fit.cost();
  EXPECT_NEAR(c.fixed_s, 100e-6, 1e-9);
  EXPECT_NEAR(1.0 / c.per_byte_s, 80e9, 0.023 * 80e9);  // rounded to 1/16 of an octave
  EXPECT_NEAR(c.seconds(10, kExpert), 100e-6 + 10 * kExpert / 80e9, 0.023 * 10 * kExpert / 80e9);
  EXPECT_EQ(c.seconds(0, kExpert), 0.0);
}

TEST(CostFit, SamplesOfOneSizeGiveTheMeanSpeedThroughTheOrigin) {
  CostFit fit;
  for (int i = 0; i < 100; ++i) fit.add(20 * kExpert, 20 * kExpert / 60e9 * (i % 2 ? 1.02 : 0.98));
  ASSERT_TRUE(fit.ready());
  const LineCost c = fit.cost();
  EXPECT_EQ(c.fixed_s, 0.0);
  EXPECT_NEAR(1.0 / c.per_byte_s, 60e9, 0.023 * 60e9);
  // The rounding hides the noise: the same figure whichever sample came last.
  fit.add(20 * kExpert, 20 * kExpert / 60e9 * 1.02);
  EXPECT_EQ(fit.cost().per_byte_s, c.per_byte_s);
}

TEST(CostFit, FollowsAChangeOfSpeedAndIgnoresSamplesWithoutTime) {
  CostFit fit;
  for (int i = 0; i < 300; ++i) fit.add(10 * kExpert, 10 * kExpert / 100e9);
  EXPECT_NEAR(1.0 / fit.cost().per_byte_s, 100e9, 0.023 * 100e9);
  fit.add(kExpert, -1.0);      // no time
  fit.add(kExpert, NAN);
  fit.add(kExpert, 0.0);
  EXPECT_EQ(fit.samples(), 300u);
  for (int i = 0; i < 1500; ++i) fit.add(10 * kExpert, 10 * kExpert / 40e9);  // the CPU got busy
  EXPECT_NEAR(1.0 / fit.cost().per_byte_s, 40e9, 0.023 * 40e9);
}

// The device's samples include layer-steps where it took no miss (its hits' products
// only): they fix the line's fixed part; without any sample with bytes there is no speed.
TEST(CostFit, SamplesWithoutBytesGiveTheFixedPart) {
  CostFit fit;
  for (int i = 0; i < 50; ++i) fit.add(0, 150e-6);
  EXPECT_FALSE(fit.ready()) << "no speed without bytes";
  for (int i = 0; i < 100; ++i) {
    const uint64_t bytes = (i % 2 ? 0 : 4 + i % 9) * kExpert;
    fit.add(bytes, 150e-6 + static_cast<double>(bytes) / 40e9);
  }
  ASSERT_TRUE(fit.ready());
  EXPECT_NEAR(fit.cost().fixed_s, 150e-6, 1e-9);
  EXPECT_NEAR(1.0 / fit.cost().per_byte_s, 40e9, 0.023 * 40e9);
}

TEST(CostFit, AFixedPartMakesTheDeviceTakeALoneMiss) {
  // 50 GB/s link and CPU: one miss stays on the CPU (the copy's latency loses) unless the
  // CPU pays a fixed part per layer-step; with it, every miss goes to the device.
  EXPECT_EQ(device_share_of_misses(1, kExpert, 50, LineCost{0, 1 / 50e9}), 0u);
  EXPECT_EQ(device_share_of_misses(1, kExpert, 50, LineCost{200e-6, 1 / 50e9}), 1u);
  EXPECT_EQ(device_share_of_misses(6, kExpert, 50, LineCost{0, 1 / 50e9}), 3u);
  EXPECT_EQ(device_share_of_misses(6, kExpert, 50, LineCost{0, 1 / 150e9}), 1u);  // a fast CPU keeps more
  EXPECT_EQ(device_share_of_misses(6, kExpert, 50, LineCost{}), 6u);               // no CPU figure
}

}  // namespace
}  // namespace mt
