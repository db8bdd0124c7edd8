// experts/planner.h: the GPU items never exceed device memory; the auto expert cache is
// device memory less dense weights, KV cache, shared experts and the stated reserve; a
// plan that does not fit says why and what would; the uniform hit assumption gives
// slots / n_expert and the traffic that follows from it (pageable misses at the pageable
// link speed); a popularity profile changes the hit rate to its coverage; auto picks the
// fastest mode that fits; the pin budget is capped at host memory less the file; the JSON
// carries the documented keys; bad inputs are errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <random>

#include "experts/planner.h"

namespace mt {
namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

// One MoE layer per entry (block index = position), (gate, up, down) bytes per expert.
ExpertGeometry geometry_of(const std::vector<std::array<uint64_t, 3>>& layers, uint32_t n_expert) {
  ExpertGeometry g;
  g.n_expert = n_expert;
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerExpertGeometry l;
    l.layer = static_cast<uint32_t>(i);
    l.n_expert = n_expert;
    for (int p = 0; p < kExpertProjCount; ++p) {
      l.proj[p].present = true;
      l.proj[p].type = QuantType::Q4_K;
      l.proj[p].bytes_per_expert = layers[i][p];
      g.max_bytes[p] = std::max(g.max_bytes[p], layers[i][p]);
    }
    g.compact_bytes += l.bank_bytes();
    g.layers.push_back(l);
    auto it = std::find_if(g.groups.begin(), g.groups.end(), [&](const GeometryGroup& gr) {
      return gr.bytes[0] == layers[i][0] && gr.bytes[1] == layers[i][1] && gr.bytes[2] == layers[i][2];
    });
    if (it == g.groups.end()) {
      GeometryGroup gr;
      for (int p = 0; p < kExpertProjCount; ++p) gr.bytes[p] = layers[i][p];
      gr.types = "q4_K/q4_K/q4_K";
      g.groups.push_back(gr);
      it = g.groups.end() - 1;
    }
    it->layers.push_back(l.layer);
  }
  for (const LayerExpertGeometry& l : g.layers) {
    g.padded_bytes += (g.max_bytes[0] + g.max_bytes[1] + g.max_bytes[2]) * l.n_expert;
  }
  std::stable_sort(g.groups.begin(), g.groups.end(),
                   [](const GeometryGroup& a, const GeometryGroup& b) { return a.bytes_per_expert() > b.bytes_per_expert(); });
  return g;
}

// 4 layers of 1 MiB experts (64 per layer, top-8), on a 24 GiB GPU and 128 GiB of RAM.
PlanInputs base_inputs() {
  PlanInputs in;
  in.geometry = geometry_of(std::vector<std::array<uint64_t, 3>>(4, {384 * 1024, 384 * 1024, 256 * 1024}), 64);
  in.model.file_bytes = in.geometry.compact_bytes + 2 * kGiB;
  in.model.dense_bytes = 1 * kGiB;
  in.model.token_embd_bytes = 512 * kMiB;
  in.model.token_embd_row_bytes = 4096;
  in.model.kv_bytes_per_token_f16 = 48 * 2 * 4 * 128 * 2;  // 98304
  in.model.kv_bytes_per_token_q8_0 = 48 * 2 * 4 * 128 * 34 / 32;
  in.model.n_expert_used = 8;
  in.model.context_length = 262144;
  in.device_bytes = 24 * kGiB;
  in.host_bytes = 128 * kGiB;
  in.ctx = 32768;
  in.hw = default_hw_profile();
  return in;
}

const ModePlan& mode(const Plan& p, MoeMode m) { return p.modes[static_cast<size_t>(m)]; }

TEST(Planner, GpuItemsNeverExceedDeviceMemory) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 400; ++trial) {
    PlanInputs in = base_inputs();
    in.device_bytes = (1 + rng() % 48) * kGiB / 2;
    in.ctx = 1u << (8 + rng() % 11);
    in.kv = rng() % 2 ? KvType::kF16 : KvType::kQ8_0;
    in.batch = 1 + rng() % 4;
    in.model.shared_expert_bytes = (rng() % 3) * 300 * kMiB;
    if (rng() % 2) in.expert_cache_bytes = rng() % (24 * kGiB);
    auto p = make_plan(in);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    uint64_t sum = 0;
    for (const GpuItem& item : p->gpu) sum += item.bytes;
    EXPECT_EQ(sum, p->gpu_bytes);
    EXPECT_LE(p->pools.used_bytes(), p->expert_cache_bytes);
    const ModePlan& stream = mode(*p, MoeMode::kStream);
    EXPECT_EQ(stream.fits, mode(*p, MoeMode::kHybrid).fits);
    if (stream.fits) {
      EXPECT_LE(p->gpu_bytes, in.device_bytes) << "trial " << trial;
      EXPECT_TRUE(stream.why.empty());
    } else {
      EXPECT_FALSE(stream.why.empty());
    }
  }
}

TEST(Planner, AutoCacheIsDeviceMemoryLessTheRest) {
  for (uint64_t device : {8 * kGiB, 24 * kGiB, 80 * kGiB}) {
    PlanInputs in = base_inputs();
    in.device_bytes = device;
    in.model.shared_expert_bytes = 200 * kMiB;
    auto p = make_plan(in);
    ASSERT_TRUE(p.ok());
    const uint64_t reserve = std::max(512 * kMiB, device / 20);
    EXPECT_EQ(p->reserve_bytes, reserve);
    EXPECT_EQ(p->kv_bytes, 32768ull * 98304);
    EXPECT_TRUE(p->expert_cache_auto);
    EXPECT_EQ(p->expert_cache_bytes, device - 1 * kGiB - p->kv_bytes - 200 * kMiB - reserve);
    EXPECT_TRUE(mode(*p, MoeMode::kHybrid).fits);
  }
}

TEST(Planner, PlanThatCannotFitSaysWhyAndWhatWould) {
  PlanInputs in = base_inputs();
  in.device_bytes = 16 * kGiB;
  in.ctx = 262144;  // 24 GiB of f16 KV
  in.mode = RequestedMode::kStream;
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->why.find("KV cache for ctx 262144 at f16 needs 24.00 GiB"), std::string::npos) << p->why;
  EXPECT_NE(p->why.find("--kv-type q8_0 or --ctx-size 131072 fits"), std::string::npos) << p->why;
  EXPECT_NE(p->why.find("needs at least"), std::string::npos) << p->why;

  in.mode = RequestedMode::kAuto;  // the CPU still fits: auto takes it
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fits);
  EXPECT_EQ(p->mode, MoeMode::kCpu);
  EXPECT_FALSE(mode(*p, MoeMode::kHybrid).fits);

  in.device_bytes = 1 * kGiB;  // not even the dense weights
  in.ctx = 4096;
  in.mode = RequestedMode::kHybrid;
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->why.find("needs at least"), std::string::npos) << p->why;
  EXPECT_EQ(p->why.find("--ctx"), std::string::npos) << p->why;

  in.device_bytes = 24 * kGiB;  // an explicit cache larger than what is left
  in.expert_cache_bytes = 23 * kGiB;
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->why.find("expert cache of 23.00 GiB does not fit"), std::string::npos) << p->why;

  in.device_bytes = 0;
  in.expert_cache_bytes.reset();
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->why.find("no GPU"), std::string::npos) << p->why;

  in.mode = RequestedMode::kCpu;  // a file larger than host memory
  in.host_bytes = 2 * kGiB;
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->why.find("mapped whole"), std::string::npos) << p->why;
}

TEST(Planner, UniformHitAssumption) {
  PlanInputs in = base_inputs();
  const double expert = 1024.0 * 1024;
  in.expert_cache_bytes = 4 * 16 * kMiB;  // 16 slots in each of the 4 layers
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->pools.pools.size(), 1u);
  EXPECT_EQ(p->pools.pools[0].slots, 64u);
  EXPECT_DOUBLE_EQ(p->hit_rate, 16.0 / 64);
  EXPECT_NE(p->hit_rate_assumption.find("uniform"), std::string::npos);
  EXPECT_EQ(p->pin.pinned.size(), 4u);  // 64 GiB auto budget holds every layer
  const double selected = 4 * 8 * expert;
  const ModePlan& hybrid = mode(*p, MoeMode::kHybrid);
  EXPECT_DOUBLE_EQ(hybrid.traffic.expert_bytes, selected);
  EXPECT_DOUBLE_EQ(hybrid.traffic.hit_bytes, selected * 0.25);
  EXPECT_DOUBLE_EQ(hybrid.traffic.cpu_expert_bytes, selected * 0.75);
  EXPECT_DOUBLE_EQ(hybrid.traffic.copied_bytes, 0);
  EXPECT_DOUBLE_EQ(mode(*p, MoeMode::kStream).traffic.copied_bytes, selected * 0.75);
  EXPECT_DOUBLE_EQ(mode(*p, MoeMode::kCpu).traffic.expert_bytes, selected);
  EXPECT_DOUBLE_EQ(mode(*p, MoeMode::kCpu).traffic.dense_bytes, 1.0 * kGiB + 4096);
  for (const ModePlan& m : p->modes) EXPECT_GT(m.predicted.tokens_per_s, 0) << moe_mode_name(m.mode);

  in.pin_budget = 0;  // every layer pageable: misses cost the pageable link speed
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pin.pageable.size(), 4u);
  const double ratio = in.hw.h2d_gbps(1 << 20, true) / in.hw.h2d_gbps(1 << 20, false);
  EXPECT_DOUBLE_EQ(mode(*p, MoeMode::kStream).traffic.copied_bytes, selected * 0.75 * ratio);
}

TEST(Planner, PopularityChangesTheHitRate) {
  PlanInputs in = base_inputs();
  in.expert_cache_bytes = 4 * 16 * kMiB;
  PopularityProfile pop;
  pop.n_expert = 64;
  pop.tokens = 1000;
  pop.counts.resize(4);
  for (auto& c : pop.counts) {
    for (uint32_t e = 0; e < 64; ++e) c.push_back(64 - e);  // expert 0 most popular
  }
  in.popularity = &pop;
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  const double coverage = (64 + 49) * 16 / 2.0 / (64 * 65 / 2.0);
  EXPECT_DOUBLE_EQ(p->hit_rate, coverage);
  EXPECT_GT(p->hit_rate, 0.25);
  EXPECT_NE(p->hit_rate_assumption.find("popularity"), std::string::npos);
  in.popularity = nullptr;
  auto same_cache = make_plan(in);
  ASSERT_TRUE(same_cache.ok());
  EXPECT_GT(mode(*p, MoeMode::kHybrid).predicted.tokens_per_s, mode(*same_cache, MoeMode::kHybrid).predicted.tokens_per_s);

  pop.counts[2].clear();  // a layer the profile never saw: uniform for it, and said so
  in.popularity = &pop;
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->hit_rate, (3 * coverage + 0.25) / 4);
  EXPECT_TRUE(std::any_of(p->notes.begin(), p->notes.end(),
                          [](const std::string& n) { return n.find("1 MoE layers have no counts") != std::string::npos; }));

  pop.n_expert = 32;  // a profile of another model
  EXPECT_FALSE(make_plan(in).ok());
}

TEST(Planner, AutoPicksTheFastestModeThatFits) {
  PlanInputs in = base_inputs();
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->modes.size(), 3u);
  double best = 0;
  for (const ModePlan& m : p->modes) {
    if (m.fits) best = std::max(best, m.predicted.tokens_per_s);
  }
  EXPECT_EQ(mode(*p, p->mode).predicted.tokens_per_s, best);
  EXPECT_TRUE(p->fits);

  in.device_bytes = 0;  // no GPU: cpu only, nothing on the device, nothing pinned
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->mode, MoeMode::kCpu);
  EXPECT_TRUE(p->fits);
  EXPECT_TRUE(p->gpu.empty());
  EXPECT_FALSE(mode(*p, MoeMode::kStream).available);
  EXPECT_FALSE(mode(*p, MoeMode::kHybrid).available);
  EXPECT_TRUE(p->pin.pinned.empty());
  EXPECT_EQ(p->pin.pageable.size(), 4u);
  EXPECT_DOUBLE_EQ(p->hit_rate, 0);
}

TEST(Planner, PinBudgetIsCappedAtHostMemoryLessTheFile) {
  PlanInputs in = base_inputs();
  in.host_bytes = in.model.file_bytes + 3 * kMiB * 64 / 2;  // room for 1.5 layers
  in.pin_budget = 15 * kGiB;
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pin_budget, in.host_bytes - in.model.file_bytes);
  EXPECT_EQ(p->pin.pinned.size(), 1u);
  EXPECT_LE(p->host_needed_bytes, in.host_bytes);
  in.pin_budget.reset();  // auto: half of host memory
  in.host_bytes = 128 * kGiB;
  p = make_plan(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pin_budget, 64 * kGiB);
}

TEST(Planner, JsonCarriesTheDocumentedKeys) {
  PlanInputs in = base_inputs();
  auto p = make_plan(in);
  ASSERT_TRUE(p.ok());
  const auto j = nlohmann::json::parse(plan_to_json(*p));
  for (const char* key : {"pools", "pinned_layers", "pageable_layers", "predicted", "bottleneck", "mode", "fits", "why",
                          "gpu", "expert_cache_bytes", "hit_rate_assumption", "hw_profile_source"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  ASSERT_EQ(j["pools"].size(), 1u);
  for (const char* key : {"expert_bytes", "layers", "slots", "bytes"}) EXPECT_TRUE(j["pools"][0].contains(key)) << key;
  for (const char* m : {"cpu", "stream", "hybrid"}) {
    EXPECT_TRUE(j["predicted"][m].is_number()) << m;
    EXPECT_TRUE(j["bottleneck"][m].is_string()) << m;
  }
  EXPECT_EQ(j["hw_profile_source"], "assumed");
  EXPECT_FALSE(plan_to_text(*p).empty());
}

TEST(Planner, BadInputsAreErrors) {
  PlanInputs in = base_inputs();
  in.ctx = 0;
  EXPECT_FALSE(make_plan(in).ok());
  in = base_inputs();
  in.model.n_expert_used = 65;
  EXPECT_FALSE(make_plan(in).ok());
  in = base_inputs();
  in.geometry = ExpertGeometry{};
  EXPECT_FALSE(make_plan(in).ok());
}

}  // namespace
}  // namespace mt
