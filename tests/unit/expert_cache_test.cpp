// experts/cache.h under random workloads, for every policy and budgets from nothing to
// everything: no slot shared by two experts, expert_to_slot and the slots agree, a layer
// never holds more than its share, counters add up (hits + misses = lookups, resident =
// admissions - evictions, bytes copied = admissions x expert bytes), each policy's rule
// holds (static-hot: only hot experts, never evicted; frequency: admitted only after
// `admit_after` requests), and invalidation empties a layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "experts/cache.h"

namespace mt {
namespace {

ExpertGeometry two_group_geometry(uint32_t n_expert) {
  ExpertGeometry g;
  g.n_expert = n_expert;
  GeometryGroup big, small;
  big.bytes[0] = big.bytes[1] = 6 << 20;
  big.bytes[2] = 6 << 20;
  small.bytes[0] = small.bytes[1] = 2 << 20;
  small.bytes[2] = 1 << 20;
  big.layers = {0, 3};
  small.layers = {1, 2, 4, 5};
  g.groups = {big, small};
  return g;
}

void check_layer(const ExpertCache& c, uint32_t layer, uint32_t n_expert, uint64_t lookups) {
  const LayerSlots& w = c.slots(layer);
  uint32_t resident = 0;
  for (uint32_t s = 0; s < w.count; ++s) {
    const int32_t e = c.expert_in(layer, s);
    if (e < 0) continue;
    ++resident;
    ASSERT_EQ(c.slot_of(layer, static_cast<uint32_t>(e)), static_cast<int32_t>(s)) << "layer " << layer;
  }
  uint32_t mapped = 0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const int32_t s = c.slot_of(layer, e);
    if (s < 0) continue;
    ++mapped;
    ASSERT_LT(static_cast<uint32_t>(s), w.count);
    ASSERT_EQ(c.expert_in(layer, static_cast<uint32_t>(s)), static_cast<int32_t>(e));
  }
  EXPECT_EQ(mapped, resident);  // with the two checks above: no slot shared
  const CacheCounters& k = c.counters(layer);
  EXPECT_EQ(k.hits + k.misses, lookups);
  EXPECT_EQ(k.admissions - k.evictions, resident);
  EXPECT_EQ(k.bytes_copied, k.admissions * w.expert_bytes);
}

TEST(ExpertCache, InvariantsUnderRandomWorkloads) {
  const uint32_t n_expert = 32, n_layers = 6, top_k = 4;
  const ExpertGeometry g = two_group_geometry(n_expert);
  uint64_t all = 0;
  for (const GeometryGroup& grp : g.groups) all += grp.bytes_per_expert() * grp.layers.size() * n_expert;
  std::mt19937 rng(3);
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kFrequency, CachePolicy::kStaticHot, CachePolicy::kLru2}) {
    for (int b = 0; b <= 10; ++b) {
      const PoolPlan plan = plan_pools(g, all / 10 * b);
      CacheOptions opt;
      opt.policy = policy;
      opt.hot.assign(n_layers, {0, 1, 2, 3, 4, 5, 6, 7});
      ExpertCache cache(plan, n_layers, n_expert, opt);
      std::vector<uint64_t> lookups(n_layers, 0);
      std::vector<std::vector<uint32_t>> requests(n_layers, std::vector<uint32_t>(n_expert, 0));
      for (int step = 0; step < 300; ++step) {
        for (uint32_t layer = 0; layer < n_layers; ++layer) {
          std::vector<uint32_t> chosen;
          while (chosen.size() < top_k) {  // skewed: low ids are popular
            const auto e = static_cast<uint32_t>(std::min<double>(n_expert - 1, std::exponential_distribution<double>(0.15)(rng)));
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
          }
          std::vector<uint32_t> used_now;
          for (uint32_t e : chosen) {
            ++lookups[layer];
            ++requests[layer][e];
            if (cache.lookup(layer, e) >= 0) {
              used_now.push_back(e);
              continue;
            }
            const int32_t s = cache.admit(layer, e);
            for (uint32_t u : used_now) {
              ASSERT_GE(cache.slot_of(layer, u), 0) << "an expert in use this step was evicted";
            }
            if (s < 0) continue;
            used_now.push_back(e);
            ASSERT_EQ(cache.slot_of(layer, e), s);
            if (policy == CachePolicy::kStaticHot) {
              ASSERT_LT(e, 8u) << "a cold expert was admitted";
            }
            if (policy == CachePolicy::kFrequency) {
              ASSERT_GE(requests[layer][e], opt.admit_after);
            }
          }
          if (step == 150 && layer == 2) {
            cache.invalidate_layer(layer);
            for (uint32_t e = 0; e < n_expert; ++e) ASSERT_LT(cache.slot_of(layer, e), 0);
          }
        }
        cache.next_step();
      }
      for (uint32_t layer = 0; layer < n_layers; ++layer) {
        check_layer(cache, layer, n_expert, lookups[layer]);
        if (policy == CachePolicy::kStaticHot && layer != 2) {
          EXPECT_EQ(cache.counters(layer).evictions, 0u);
        }
      }
      if (b == 10) {  // everything fits: LRU ends with no evictions outside the invalidated layer
        if (policy == CachePolicy::kLru || policy == CachePolicy::kLru2) {
          EXPECT_EQ(cache.counters(0).evictions, 0u);
        }
      }
      if (b == 0) {
        for (uint32_t layer = 0; layer < n_layers; ++layer) EXPECT_EQ(cache.counters(layer).admissions, 0u);
      }
    }
  }
}

TEST(ExpertCache, LruEvictsTheLeastRecentlyUsed) {
  ExpertGeometry g = two_group_geometry(8);
  g.groups.resize(1);
  g.groups[0].layers = {0};
  const PoolPlan plan = plan_pools(g, 2 * g.groups[0].bytes_per_expert());  // 2 slots
  ExpertCache c(plan, 1, 8, {});
  ASSERT_EQ(c.slots(0).count, 2u);
  for (uint32_t e : {1u, 2u}) {
    EXPECT_LT(c.lookup(0, e), 0);
    EXPECT_GE(c.admit(0, e), 0);
    c.next_step();
  }
  EXPECT_GE(c.lookup(0, 1), 0);  // 1 used again: 2 is now the least recent
  c.next_step();
  EXPECT_LT(c.lookup(0, 3), 0);
  EXPECT_GE(c.admit(0, 3), 0);
  EXPECT_LT(c.slot_of(0, 2), 0);
  EXPECT_GE(c.slot_of(0, 1), 0);
}

}  // namespace
}  // namespace mt
