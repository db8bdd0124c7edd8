// experts/cache.h's lru2 policy (LRU-2) on hand-made sequences: the victim is the resident
// expert whose second most recent step of use is oldest, experts used in one step only
// first (among them the least recently used), lookups within one step count once, the
// history of an evicted expert is remembered, and an expert in use this step is never
// the victim.
#include <gtest/gtest.h>

#include <initializer_list>

#include "experts/cache.h"

namespace mt {
namespace {

// One layer of `slots` slots of 1 MiB experts, n_expert experts.
ExpertCache lru2_cache(uint32_t slots, uint32_t n_expert) {
  ExpertGeometry g;
  g.n_expert = n_expert;
  // Built in place (a copy of a one-element vector trips GCC 13's -Warray-bounds).
  GeometryGroup& grp = g.groups.emplace_back();
  grp.bytes[0] = grp.bytes[1] = grp.bytes[2] = 1 << 20;
  grp.layers.push_back(0);
  CacheOptions o;
  o.policy = CachePolicy::kLru2;
  ExpertCache c(plan_pools(g, slots * g.groups[0].bytes_per_expert()), 1, n_expert, o);
  EXPECT_EQ(c.slots(0).count, slots);
  return c;
}

// One step: each expert looked up and, on a miss, admitted. Returns the experts evicted.
std::vector<uint32_t> lru2_step(ExpertCache& c, std::initializer_list<uint32_t> experts) {
  std::vector<int32_t> before;
  for (uint32_t s = 0; s < c.slots(0).count; ++s) before.push_back(c.expert_in(0, s));
  for (uint32_t e : experts) {
    if (c.lookup(0, e) < 0) {
      EXPECT_GE(c.admit(0, e), 0) << "expert " << e << " not admitted";
    }
  }
  std::vector<uint32_t> gone;
  for (int32_t e : before) {
    if (e >= 0 && c.slot_of(0, static_cast<uint32_t>(e)) < 0) gone.push_back(static_cast<uint32_t>(e));
  }
  c.next_step();
  return gone;
}

TEST(CacheLru2, OneOffExpertsGoBeforeReturningOnes) {
  ExpertCache c = lru2_cache(3, 16);
  EXPECT_TRUE(lru2_step(c, {1, 2}).empty());   // step 0
  EXPECT_TRUE(lru2_step(c, {1}).empty());      // step 1: 1 has two references (0, 1)
  EXPECT_TRUE(lru2_step(c, {3}).empty());      // step 2: full (1, 2, 3)
  // 2 (used at step 0 only) and 3 (step 2 only) have one reference: the least recent of
  // them, 2, goes, although LRU would take 1 (last used at step 1, before 3).
  EXPECT_EQ(lru2_step(c, {4}), std::vector<uint32_t>{2});  // step 3
  // 3 and 4 have one reference each: 3 is the less recent.
  EXPECT_EQ(lru2_step(c, {5}), std::vector<uint32_t>{3});  // step 4
  // 4 and 5 one reference; 1 keeps its place.
  EXPECT_EQ(lru2_step(c, {6}), std::vector<uint32_t>{4});  // step 5
  EXPECT_GE(c.slot_of(0, 1), 0);
  const CacheCounters& k = c.counters(0);
  EXPECT_EQ(k.hits, 1u);
  EXPECT_EQ(k.misses, 6u);
  EXPECT_EQ(k.evictions, 3u);
}

TEST(CacheLru2, OldestSecondReferenceGoesFirst) {
  ExpertCache c = lru2_cache(2, 16);
  lru2_step(c, {1});     // step 0
  lru2_step(c, {2});     // step 1
  lru2_step(c, {1});     // step 2: 1's references 0, 2
  lru2_step(c, {2});     // step 3: 2's references 1, 3
  lru2_step(c, {1});     // step 4: 1's references 2, 4
  // Both have two references; the second most recent: 1 at step 2, 2 at step 1: 2 goes
  // (LRU would also take 2 here: last used at step 3 against 4).
  EXPECT_EQ(lru2_step(c, {3}), std::vector<uint32_t>{2});  // step 5
  // 3 has one reference, 1 two: 3 goes although it is the most recent (LRU would evict 1).
  EXPECT_EQ(lru2_step(c, {4}), std::vector<uint32_t>{3});  // step 6
}

TEST(CacheLru2, ReferencesCountPerStepAndSurviveEviction) {
  ExpertCache c = lru2_cache(2, 16);
  // Two lookups of 1 in one step are one reference: 1 still counts as used once.
  EXPECT_LT(c.lookup(0, 1), 0);
  EXPECT_GE(c.admit(0, 1), 0);
  EXPECT_GE(c.lookup(0, 1), 0);
  c.next_step();    // step 0 done
  lru2_step(c, {2});     // step 1
  lru2_step(c, {2});     // step 2: 2's references 1, 2; 1 only step 0
  EXPECT_EQ(lru2_step(c, {3}), std::vector<uint32_t>{1});  // step 3: 1 (one reference) goes
  // 1 comes back at step 4: its history (step 0) makes it a twice-referenced expert, so
  // the victim is 3 (one reference), not 2.
  EXPECT_EQ(lru2_step(c, {1}), std::vector<uint32_t>{3});  // step 4
  // Now 1 (references 0, 4) and 2 (1, 2): 1's second most recent (0) is older: 1 goes.
  EXPECT_EQ(lru2_step(c, {5}), std::vector<uint32_t>{1});  // step 5
}

TEST(CacheLru2, ExpertsInUseThisStepAreNeverVictims) {
  ExpertCache c = lru2_cache(2, 16);
  lru2_step(c, {1, 2});  // step 0: full
  // Step 1 uses 1 and 2 and then misses 3: both residents are in use, so no admission.
  EXPECT_GE(c.lookup(0, 1), 0);
  EXPECT_GE(c.lookup(0, 2), 0);
  EXPECT_LT(c.lookup(0, 3), 0);
  EXPECT_LT(c.admit(0, 3), 0);
  EXPECT_GE(c.slot_of(0, 1), 0);
  EXPECT_GE(c.slot_of(0, 2), 0);
}

}  // namespace
}  // namespace mt
