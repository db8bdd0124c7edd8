// experts/pools.h: seed 000's figure on the laguna-s geometry (8,640 MiB -> 988 Q4_K-size
// and 202 BF16-size slots, waste under one slot), and the sizing invariants over random
// geometries and budgets: never over budget, never more slots than experts, every layer
// of a pool within one slot of the others, and no further slot of any pool would fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "experts/pools.h"
#include "gguf/reader.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

void check_invariants(const ExpertGeometry& g, const PoolPlan& plan, uint64_t budget) {
  ASSERT_EQ(plan.pools.size(), g.groups.size());
  EXPECT_LE(plan.used_bytes(), budget);
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const ExpertPool& p = plan.pools[i];
    const uint64_t cap = static_cast<uint64_t>(g.groups[i].layers.size()) * g.n_expert;
    EXPECT_EQ(p.expert_bytes, g.groups[i].bytes_per_expert());
    EXPECT_LE(p.slots, cap);
    ASSERT_EQ(p.slots_per_layer.size(), p.layers.size());
    uint64_t sum = 0;
    for (uint32_t s : p.slots_per_layer) {
      sum += s;
      EXPECT_LE(s, g.n_expert);
    }
    EXPECT_EQ(sum, p.slots);
    const auto [lo, hi] = std::minmax_element(p.slots_per_layer.begin(), p.slots_per_layer.end());
    EXPECT_LE(*hi - *lo, 1u);
    // Nothing left over that would buy another slot of this pool.
    if (p.slots < cap) {
      EXPECT_LT(budget - plan.used_bytes(), p.expert_bytes) << "pool " << i;
    }
  }
}

TEST(ExpertPools, LagunaSeed000Figure) {
  auto c = synth::preset("laguna-s");
  ASSERT_TRUE(c.ok());
  c->sparse = true;
  const std::string path = test::temp_path("pools-laguna.gguf");
  ASSERT_TRUE(synth::write_model(*c, {path, false}).ok());
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto g = read_expert_geometry(*f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const uint64_t budget = 8640ull << 20;
  const PoolPlan plan = plan_pools(*g, budget);
  ASSERT_EQ(plan.pools.size(), 2u);
  const ExpertPool& bf16 = plan.pools[0];
  const ExpertPool& q4k = plan.pools[1];
  EXPECT_EQ(bf16.expert_bytes, 18ull << 20);
  EXPECT_EQ(q4k.expert_bytes, 5308416ull);
  EXPECT_NEAR(static_cast<double>(q4k.slots), 988.0, 9.88);
  EXPECT_NEAR(static_cast<double>(bf16.slots), 202.0, 2.02);
  EXPECT_EQ(q4k.slots, 988u);
  EXPECT_EQ(bf16.slots, 202u);
  EXPECT_LT(budget - plan.used_bytes(), q4k.expert_bytes);  // less than one slot of either size wasted
  check_invariants(*g, plan, budget);

  // The unified layout of the same budget: seed 000's 480 max-size slots, 10-11 per layer
  // for every layer, each Q4_K layer's 5.0625 MiB expert in an 18 MiB slot.
  const PoolPlan unified = plan_unified_pool(*g, budget);
  ASSERT_EQ(unified.pools.size(), 1u);
  const ExpertPool& u = unified.pools[0];
  EXPECT_EQ(u.expert_bytes, 18ull << 20);
  EXPECT_EQ(u.slots, 480u);
  EXPECT_EQ(u.layers.size(), 47u);
  EXPECT_EQ(u.slots_per_layer.front(), 11u);
  EXPECT_EQ(u.slots_per_layer.back(), 10u);
  uint32_t q4k_layers = 0;
  for (size_t i = 0; i < u.layers.size(); ++i) {
    EXPECT_TRUE(u.layer_bytes[i] == (18ull << 20) || u.layer_bytes[i] == 5308416ull) << u.layer_bytes[i];
    q4k_layers += u.layer_bytes[i] == 5308416ull;
  }
  EXPECT_EQ(q4k_layers, 39u);
  EXPECT_EQ(unified.used_bytes(), budget);
}

TEST(ExpertPools, InvariantsOverRandomGeometriesAndBudgets) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    ExpertGeometry g;
    g.n_expert = 1 + rng() % 128;
    const int n_groups = 1 + static_cast<int>(rng() % 4);
    uint32_t layer = 0;
    for (int i = 0; i < n_groups; ++i) {
      GeometryGroup grp;
      grp.bytes[0] = grp.bytes[1] = 4096 * (1 + rng() % 4000);
      grp.bytes[2] = 4096 * (1 + rng() % 2000);
      const uint32_t n_layers = 1 + rng() % 40;
      for (uint32_t l = 0; l < n_layers; ++l) grp.layers.push_back(layer++);
      g.groups.push_back(grp);
    }
    std::sort(g.groups.begin(), g.groups.end(),
              [](const GeometryGroup& a, const GeometryGroup& b) { return a.bytes_per_expert() > b.bytes_per_expert(); });
    uint64_t all = 0;
    for (const GeometryGroup& grp : g.groups) all += grp.bytes_per_expert() * grp.layers.size() * g.n_expert;
    const uint64_t budget = trial % 10 == 0 ? 0 : (trial % 10 == 1 ? all * 2 : rng() % (all + 1));
    const PoolPlan plan = plan_pools(g, budget);
    check_invariants(g, plan, budget);
    if (budget == 0) {
      EXPECT_EQ(plan.used_bytes(), 0u);
    }
    if (budget >= all) {
      EXPECT_EQ(plan.used_bytes(), all);  // every expert of every layer fits
    }
  }
}

}  // namespace
}  // namespace mt
