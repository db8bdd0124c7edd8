// experts/policy_study.h: step_range cuts a trace by step ordinals; compare_policies counts
// hits only after the fill steps; pick_policy_by_warmup keeps the candidate with the best
// rate over the warm-up window's second half: on a cyclic scan of 3 experts through 2
// slots LRU never hits while frequency (admit after 2 requests, 4 steps of dwell) does.
#include <gtest/gtest.h>

#include "experts/policy_study.h"

namespace mt {
namespace {

// One MoE layer (block 0) of n_expert 1 MiB F32 experts.
ExpertGeometry one_layer(uint32_t n_expert) {
  ExpertGeometry g;
  g.n_expert = n_expert;
  LayerExpertGeometry l;
  l.n_expert = n_expert;
  for (ProjGeometry& p : l.proj) {
    p.present = true;
    p.n_in = 512;
    p.n_out = 512;
    p.bytes_per_expert = 512 * 512 * 4;
  }
  g.layers = {l};
  GeometryGroup grp;
  grp.bytes[0] = grp.bytes[1] = grp.bytes[2] = 512 * 512 * 4;
  grp.layers.push_back(0);
  g.groups.push_back(std::move(grp));  // not `= {grp}`: GCC 13 -Warray-bounds false positive
  g.compact_bytes = l.bank_bytes();
  return g;
}

// Layer 0, one expert per step, ids cycling 0, 1, 2, 0, 1, 2, ...
RoutingTrace cyclic(uint64_t steps, uint32_t n) {
  RoutingTrace t;
  t.top_k = 1;
  t.n_expert = n;
  t.layers = {0};
  for (uint64_t s = 0; s < steps; ++s) t.events.push_back({0, static_cast<uint32_t>(s), s, {static_cast<int32_t>(s % n)}, {}});
  t.n_steps = t.n_tokens = steps;
  return t;
}

TEST(PolicyStudy, StepRangeCutsByStep) {
  const RoutingTrace t = cyclic(10, 3);
  const RoutingTrace mid = step_range(t, 4, 3);
  ASSERT_EQ(mid.events.size(), 3u);
  EXPECT_EQ(mid.events.front().step, 4u);
  EXPECT_EQ(mid.events.back().step, 6u);
  EXPECT_EQ(mid.n_steps, 3u);
  EXPECT_EQ(mid.n_tokens, 3u);
  EXPECT_EQ(step_range(t, 8, 100).events.size(), 2u);
  EXPECT_TRUE(step_range(t, 10, 5).events.empty());
}

TEST(PolicyStudy, ScanThroughTwoSlotsPicksFrequencyOverLru) {
  const ExpertGeometry g = one_layer(8);
  const PoolPlan plan = plan_pools(g, 2 * g.groups[0].bytes_per_expert());  // 2 slots
  ASSERT_EQ(plan.pools.at(0).slots, 2u);
  StudySetup setup{&g, &plan, 1, {}, {}};
  const RoutingTrace t = cyclic(120, 3);
  const CachePolicy candidates[] = {CachePolicy::kLru, CachePolicy::kFrequency};
  auto all = compare_policies(t, setup, candidates, 20);
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].hit_rate, 0.0);  // LRU: each expert evicted just before it comes back
  EXPECT_GT((*all)[1].hit_rate, 0.2);  // frequency: residents stay their minimum dwell and hit
  auto pick = pick_policy_by_warmup(t, 60, setup, candidates);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->policy, CachePolicy::kFrequency);
  EXPECT_EQ(pick->warmup_steps, 60u);
  ASSERT_EQ(pick->trials.size(), 2u);
  EXPECT_EQ(pick->trials[0].hit_rate, 0.0);
  // Only the steps after the fill count: the fill's cold misses do not lower the rate.
  auto no_fill = compare_policies(t, setup, candidates, 0);
  ASSERT_TRUE(no_fill.ok());
  EXPECT_LT((*no_fill)[1].hit_rate, (*all)[1].hit_rate);
  EXPECT_FALSE(pick_policy_by_warmup(t, 60, setup, {}).ok());
}

}  // namespace
}  // namespace mt
