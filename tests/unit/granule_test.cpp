// experts/granule.h: every metric of the trade curve computed by hand on small traces,
// for both packings; partial last chunks, prompt steps (a union of tokens), per-layer
// expert sizes; hotness-sorted never holds more resident than arbitrary on skewed
// traces; and seed 003's shape (minimum at two 0.75 MiB experts per 2 MiB granule).
#include <gtest/gtest.h>

#include <algorithm>

#include "experts/granule.h"

namespace mt {
namespace {

constexpr uint64_t kOneMiB = 1ull << 20;
constexpr uint64_t kExpert = 3 * kOneMiB / 4;  // 0.75 MiB, seed 003's granite expert

struct Ev {
  uint64_t step;
  uint32_t layer, pos;
  std::vector<int32_t> experts;
};

RoutingTrace make_trace(const std::vector<Ev>& evs) {
  RoutingTrace t;
  std::vector<std::pair<uint64_t, uint32_t>> tokens;
  std::vector<uint64_t> steps;
  for (const Ev& e : evs) {
    t.events.push_back({e.layer, e.pos, e.step, e.experts, {}});
    t.top_k = static_cast<uint32_t>(e.experts.size());
    for (int32_t x : e.experts) t.n_expert = std::max(t.n_expert, static_cast<uint32_t>(x) + 1);
    t.layers.push_back(e.layer);
    tokens.emplace_back(e.step, e.pos);
    steps.push_back(e.step);
  }
  for (auto* v : {&t.layers}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  std::sort(tokens.begin(), tokens.end());
  t.n_tokens = static_cast<uint64_t>(std::unique(tokens.begin(), tokens.end()) - tokens.begin());
  std::sort(steps.begin(), steps.end());
  t.n_steps = static_cast<uint64_t>(std::unique(steps.begin(), steps.end()) - steps.begin());
  return t;
}

const GranuleRow& row(const GranuleCurve& c, uint32_t E, Packing p) {
  for (const GranuleRow& r : c.rows) {
    if (r.experts_per_chunk == E && r.packing == p) return r;
  }
  ADD_FAILURE() << "no row E=" << E << " " << packing_name(p);
  return c.rows.front();
}

void expect_row(const GranuleCurve& c, uint32_t E, Packing p, double waste, double resident, double transfer,
                double needed) {
  const GranuleRow& r = row(c, E, p);
  SCOPED_TRACE("E=" + std::to_string(E) + " " + packing_name(p));
  EXPECT_NEAR(r.waste, waste, 1e-12);
  EXPECT_NEAR(r.resident_mib, resident, 1e-12);
  EXPECT_NEAR(r.transfer_mib, transfer, 1e-12);
  EXPECT_NEAR(r.needed_mib, needed, 1e-12);
  EXPECT_NEAR(r.selectivity, needed / transfer, 1e-12);
  EXPECT_NEAR(r.overfetch, transfer / needed, 1e-12);
}

TEST(Granule, HandComputedFourExperts) {
  // One layer, 4 experts of 0.75 MiB, top-2, four decode steps. Counts: e0 4, e2 2, e1 1,
  // e3 1, so hotness order is 0, 2, 1, 3.
  const RoutingTrace t = make_trace({{0, 0, 0, {0, 1}}, {1, 0, 1, {0, 2}}, {2, 0, 2, {0, 3}}, {3, 0, 3, {2, 0}}});
  GranuleParams p;
  p.expert_bytes = kExpert;
  auto c = granule_curve(t, p);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->granule_bytes, 2 * kOneMiB);
  EXPECT_EQ(c->expert_bytes, kExpert);
  EXPECT_EQ(c->n_expert, 4u);
  EXPECT_EQ(c->top_k, 2u);
  EXPECT_EQ(c->n_layers, 1u);
  EXPECT_EQ(c->layer_steps, 4u);
  // E: 1, 2 (powers of two, and the 2 that fit one granule), 4 (the whole bank).
  ASSERT_EQ(c->rows.size(), 6u);
  // E=1: a 2 MiB granule per expert (waste 2/0.75); 2 granules per step.
  expect_row(*c, 1, Packing::kArbitrary, 8.0 / 3, 4.0, 1.5, 1.5);
  expect_row(*c, 1, Packing::kHotness, 8.0 / 3, 4.0, 1.5, 1.5);
  // E=2 arbitrary: chunks {0,1} {2,3}, 2 MiB each. Steps touch 1, 2, 2, 2 chunks.
  expect_row(*c, 2, Packing::kArbitrary, 4.0 / 3, 14.0 / 4, 10.5 / 4, 1.5);
  // E=2 hotness-sorted: chunks {0,2} {1,3}. Steps touch 2, 1, 2, 1 chunks.
  expect_row(*c, 2, Packing::kHotness, 4.0 / 3, 12.0 / 4, 9.0 / 4, 1.5);
  // E=4: one 3 MiB chunk in two granules (4 MiB), resident every step.
  expect_row(*c, 4, Packing::kArbitrary, 4.0 / 3, 4.0, 3.0, 1.5);
  expect_row(*c, 4, Packing::kHotness, 4.0 / 3, 4.0, 3.0, 1.5);
  EXPECT_EQ(c->rows[c->min_row].experts_per_chunk, 2u);
  EXPECT_EQ(c->rows[c->min_row].packing, Packing::kHotness);
  // Row order: E ascending, arbitrary before hotness-sorted.
  for (size_t i = 0; i < c->rows.size(); ++i) {
    EXPECT_EQ(c->rows[i].packing, i % 2 ? Packing::kHotness : Packing::kArbitrary);
  }
}

TEST(Granule, PartialChunksPromptStepsAndExplicitE) {
  // Five experts (n_expert from the params: expert 4 is never selected). Step 0 is a
  // prompt of two tokens: its layer-step is the union {0, 1, 3}. Step 1 selects {3, 1}.
  const RoutingTrace t = make_trace({{0, 0, 0, {0, 1}}, {0, 0, 1, {1, 3}}, {1, 0, 2, {3, 1}}});
  GranuleParams p;
  p.expert_bytes = kExpert;
  p.n_expert = 5;
  p.experts_per_chunk = {4, 2};
  auto c = granule_curve(t, p);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->rows.size(), 4u);
  EXPECT_EQ(c->layer_steps, 2u);
  // E=2: chunks of 2, 2, 1 experts, each one granule: 6 MiB for 3.75 MiB of experts.
  // needed: 3 then 2 experts. Counts: e1 3, e3 2, e0 1: hotness order 1, 3, 0, 2, 4.
  // arbitrary {0,1} {2,3} {4}: step 0 touches 2 chunks (3 MiB of experts), step 1 both.
  expect_row(*c, 2, Packing::kArbitrary, 6.0 / 3.75, 4.0, 3.0, 3.75 / 2);
  // hotness {1,3} {0,2} {4}: step 0 touches 2 chunks, step 1 one.
  expect_row(*c, 2, Packing::kHotness, 6.0 / 3.75, 3.0, 2.25, 3.75 / 2);
  // E=4: a 3 MiB chunk (4 MiB committed) and a 0.75 MiB one (2 MiB). Both packings keep
  // experts 0, 1, 3 in the first chunk.
  expect_row(*c, 4, Packing::kArbitrary, 6.0 / 3.75, 4.0, 3.0, 3.75 / 2);
  expect_row(*c, 4, Packing::kHotness, 6.0 / 3.75, 4.0, 3.0, 3.75 / 2);
  EXPECT_EQ(c->rows[c->min_row].experts_per_chunk, 2u);
  EXPECT_EQ(c->rows[c->min_row].packing, Packing::kHotness);
}

TEST(Granule, ExpertSizePerLayer) {
  // Blocks 0 and 2 are MoE (1 MiB and 0.5 MiB experts), block 1 is dense.
  const RoutingTrace t = make_trace({{0, 0, 0, {1}}, {0, 2, 0, {0}}, {1, 0, 1, {1}}, {1, 2, 1, {1}}});
  GranuleParams p;
  p.expert_bytes_by_layer = {kOneMiB, 0, kOneMiB / 2};
  auto c = granule_curve(t, p);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->expert_bytes, 0u);
  ASSERT_EQ(c->rows.size(), 4u);  // E = 1, 2
  EXPECT_EQ(c->layer_steps, 4u);
  // E=1: 4 granules (8 MiB) for 3 MiB of experts; one granule per layer-step.
  expect_row(*c, 1, Packing::kArbitrary, 8.0 / 3, 2.0, 0.75, 0.75);
  // E=2: one granule per layer (4 MiB for 3); every layer-step moves its whole bank.
  expect_row(*c, 2, Packing::kArbitrary, 4.0 / 3, 2.0, 1.5, 0.75);
  EXPECT_EQ(c->rows[c->min_row].experts_per_chunk, 1u);  // tie: the first row
  EXPECT_EQ(c->rows[c->min_row].packing, Packing::kArbitrary);

  RoutingTrace dense = t;
  dense.events[0].layer = 1;
  dense.layers = {0, 1, 2};
  auto bad = granule_curve(dense, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no expert size for layer 1"), std::string::npos);
}

TEST(Granule, DefaultChunkSizes) {
  EXPECT_EQ(default_chunk_sizes(32, 2 * kOneMiB, {kExpert}), (std::vector<uint32_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(default_chunk_sizes(48, 2 * kOneMiB, {kOneMiB * 2 / 3}), (std::vector<uint32_t>{1, 2, 3, 4, 8, 16, 32, 48}));
  EXPECT_EQ(default_chunk_sizes(4, 2 * kOneMiB, {kOneMiB / 8}), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(default_chunk_sizes(8, 2 * kOneMiB, {4 * kOneMiB}), (std::vector<uint32_t>{1, 2, 4, 8}));
}

TEST(Granule, Errors) {
  const RoutingTrace t = make_trace({{0, 0, 0, {0, 3}}});
  GranuleParams p;
  p.expert_bytes = kExpert;
  EXPECT_FALSE(granule_curve(RoutingTrace{}, p).ok());
  GranuleParams zero = p;
  zero.granule_bytes = 0;
  EXPECT_FALSE(granule_curve(t, zero).ok());
  GranuleParams no_size;
  EXPECT_FALSE(granule_curve(t, no_size).ok());
  GranuleParams few = p;
  few.n_expert = 3;
  EXPECT_FALSE(granule_curve(t, few).ok());
  for (uint32_t E : {0u, 5u}) {
    GranuleParams q = p;
    q.experts_per_chunk = {E};
    EXPECT_FALSE(granule_curve(t, q).ok()) << E;
  }
}

TEST(Granule, HotnessNeverWorseOnSkewedTraces) {
  for (uint64_t seed : {1, 2, 3}) {
    for (double skew : {0.8, 1.5}) {
      SyntheticTraceOptions o;
      o.n_layers = 6;
      o.n_tokens = 256;
      o.skew = skew;
      o.seed = seed;
      GranuleParams p;
      p.expert_bytes = kExpert;
      p.n_expert = o.n_expert;
      auto c = granule_curve(synthetic_trace(o), p);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      for (uint32_t E : {1u, 2u, 4u, 8u, 16u, 32u}) {
        EXPECT_LE(row(*c, E, Packing::kHotness).resident_mib, row(*c, E, Packing::kArbitrary).resident_mib + 1e-12)
            << "seed " << seed << " skew " << skew << " E " << E;
        EXPECT_LE(row(*c, E, Packing::kHotness).transfer_mib, row(*c, E, Packing::kArbitrary).transfer_mib + 1e-12);
      }
    }
  }
}

TEST(Granule, SeedShapeMinimumAtTwoExpertsPerGranule) {
  // Seed 003's setting: 32 experts top-8, 24 layers, 0.75 MiB experts, 2 MiB granule.
  SyntheticTraceOptions o;
  o.n_tokens = 192;
  o.skew = 1.0;
  GranuleParams p;
  p.expert_bytes = kExpert;
  p.n_expert = o.n_expert;
  auto c = granule_curve(synthetic_trace(o), p);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const GranuleRow& m = c->rows[c->min_row];
  EXPECT_EQ(m.experts_per_chunk, 2u);
  EXPECT_NEAR(row(*c, 1, Packing::kArbitrary).resident_mib, 16.0, 1e-12);  // 8 granules
  EXPECT_NEAR(row(*c, 1, Packing::kArbitrary).transfer_mib, 6.0, 1e-12);   // 8 x 0.75 MiB
  EXPECT_NEAR(row(*c, 32, Packing::kArbitrary).resident_mib, 24.0, 1e-12); // the whole bank
  EXPECT_NEAR(row(*c, 32, Packing::kArbitrary).overfetch, 4.0, 1e-12);     // seed: 400%
  for (const GranuleRow& r : c->rows) {
    EXPECT_GE(r.waste, 1.0);
    EXPECT_GT(r.selectivity, 0.0);
    EXPECT_LE(r.selectivity, 1.0);
    EXPECT_GE(r.resident_mib, m.resident_mib);
  }
  const std::string table = granule_curve_table(*c);
  EXPECT_NE(table.find("minimum resident: E=2"), std::string::npos) << table;
  const std::string json = granule_curve_json(*c);
  EXPECT_NE(json.find("\"minimum\""), std::string::npos);
}

}  // namespace
}  // namespace mt
