// Hybrid MoE execution through the simulated device: logits bit-identical to the plain
// CPU path for every policy, mode and expert budget from 0 to 100%, on two architectures
// (qwen3moe; qwen2moe with its shared expert), through a prompt batch and decode steps;
// every selected expert computed exactly once (device + CPU = distinct experts per
// layer-step); the counters consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "experts/executor.h"
#include "experts/geometry.h"
#include "experts/popularity.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

// Records, per (step, layer), the distinct experts selected.
class DistinctExperts : public Trace {
 public:
  void begin_step() override { steps.emplace_back(); }
  void routing(uint32_t layer, uint32_t, std::span<const int32_t> experts, std::span<const float>) override {
    auto& s = steps.back();
    if (s.size() <= layer) s.resize(layer + 1);
    s[layer].insert(experts.begin(), experts.end());
  }
  std::vector<std::vector<std::set<int32_t>>> steps;
};

// Logits of a 24-token prompt batch, then 8 decode steps; each step's logits appended.
std::vector<float> run_steps(const Model& model, MoeOffload* offload, Trace* trace, const std::vector<int32_t>& ids) {
  auto s = Session::create(model, 64);
  EXPECT_TRUE(s.ok());
  s->set_offload(offload);
  std::vector<float> all, step;
  EXPECT_TRUE(s->feed({ids.data(), 24}, true, &step, trace).ok());
  all = step;
  for (size_t t = 24; t < ids.size(); ++t) {
    EXPECT_TRUE(s->feed({&ids[t], 1}, false, &step, trace).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(HybridMoe, LogitsIdenticalToTheCpuPathForEveryPolicyModeAndBudget) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kQwen35Moe}) {
    synth::SynthConfig c = synth::tiny_for(arch);
    c.quant = *synth::parse_quant_mix("q4_k_m");
    c.router_skew = 1.0f;
    const std::string path = test::temp_path(std::string(arch_info(arch).name) + "-hybrid.gguf");
    ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
    auto loaded = Model::load(path, {2});
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const Model& model = **loaded;
    const uint32_t V = model.hparams().n_vocab;
    std::vector<int32_t> ids(32);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 131 + 5) % V);

    DistinctExperts ref_trace;
    const std::vector<float> ref = run_steps(model, nullptr, &ref_trace, ids);
    auto geometry = read_expert_geometry(model.file());
    ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
    const PopularityProfile pop = [&] {
      PopularityProfile p;
      p.n_expert = geometry->n_expert;
      p.counts.assign(model.hparams().n_layer, {});
      for (const auto& step : ref_trace.steps) {
        for (size_t l = 0; l < step.size(); ++l) {
          if (p.counts[l].empty()) p.counts[l].assign(p.n_expert, 0);
          for (int32_t e : step[l]) ++p.counts[l][static_cast<size_t>(e)];
        }
      }
      return p;
    }();

    // kCpu stands for hybrid with the split of misses (half of each layer-step's CPU
    // misses copied to the device and computed there).
    for (MoeMode variant : {MoeMode::kHybrid, MoeMode::kStream, MoeMode::kCpu}) {
      const bool split = variant == MoeMode::kCpu;
      const MoeMode mode = split ? MoeMode::kHybrid : variant;
      for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kFrequency, CachePolicy::kStaticHot}) {
        for (int pct : {0, 10, 25, 50, 75, 100}) {
         for (bool unified : {false, true}) {  // q4_k_m: layer 1's down is Q6_K, so unified slots are wider than layer 0's experts
          SCOPED_TRACE(std::string(arch_info(arch).name) + " " + moe_mode_name(mode) + (split ? " split" : "") + " policy " +
                       std::to_string(static_cast<int>(policy)) + " budget " + std::to_string(pct) + "%" +
                       (unified ? " unified" : " pools"));
          const uint64_t budget = geometry->compact_bytes / 100 * static_cast<uint64_t>(pct);
          const PoolPlan plan = unified ? plan_unified_pool(*geometry, budget) : plan_pools(*geometry, budget);
          CacheOptions co;
          co.policy = policy;
          co.min_dwell = 2;
          if (policy == CachePolicy::kStaticHot) {
            co.hot.assign(model.hparams().n_layer, {});
            for (uint32_t l = 0; l < model.hparams().n_layer; ++l) {
              if (!pop.counts[l].empty()) co.hot[l] = pop.ranked(l);
            }
          }
          SchedulerOptions so;
          so.mode = mode;
          so.split_misses = split;
          if (split) so.split_fraction = 0.5;
          // Half the layers' banks pinned: copies come pinned or staged through the ring.
          const uint64_t pin_budget = geometry->compact_bytes / 2;
          auto state = make_offload(model, *geometry, plan, co, so, pin_budget);
          ASSERT_TRUE(state.ok()) << state.status().to_string();
          const std::vector<float> got = run_steps(model, &(*state)->offload, nullptr, ids);
          ASSERT_EQ(got.size(), ref.size());
          ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << "logits differ";

          // Every selected expert computed once per layer-step, on exactly one side.
          const ExpertScheduler& s = *(*state)->scheduler;
          ASSERT_EQ(s.steps(), ref_trace.steps.size());
          uint64_t copied = 0;
          for (uint32_t l = 0; l < model.hparams().n_layer; ++l) {
            uint64_t distinct = 0;
            for (const auto& step : ref_trace.steps) distinct += l < step.size() ? step[l].size() : 0;
            const CacheCounters& k = s.cache().counters(l);
            const SchedulerCounters& sc = s.counters(l);
            EXPECT_EQ(sc.device_experts + sc.cpu_experts, distinct) << "layer " << l;
            EXPECT_EQ(k.hits + k.misses, distinct) << "layer " << l;
            EXPECT_EQ(k.bytes_copied, k.admissions * s.expert_bytes(l));
            if (mode == MoeMode::kStream) {
              EXPECT_EQ(sc.cpu_experts, 0u);
              EXPECT_EQ(sc.staged, k.misses - k.admissions);
            } else if (split) {
              // lround(n / 2) of each layer-step's n CPU-bound misses went to the device.
              EXPECT_LE(2 * sc.cpu_experts, k.misses) << "layer " << l;
              if (k.misses > 0) {
                EXPECT_GT(sc.device_experts, k.hits) << "layer " << l;
              }
              EXPECT_LE(sc.staged, k.misses);
            } else {
              EXPECT_EQ(sc.staged, 0u);
              EXPECT_LE(sc.cpu_experts, k.misses);
            }
            if (pct == 0) {
              EXPECT_EQ(k.hits, 0u);
            }
            copied += k.bytes_copied + sc.staged_bytes;
          }
          EXPECT_EQ((*state)->sim->bytes_copied(), copied);
          EXPECT_FALSE((*state)->pins.pinned.empty());
          EXPECT_FALSE((*state)->pins.pageable.empty());
          EXPECT_EQ((*state)->store->pinned_bytes(), (*state)->pins.pinned_bytes);
          EXPECT_LE((*state)->store->pinned_bytes(), pin_budget);
         }
        }
      }
    }
  }
}

// The split of misses: the device takes as many as make the copies (after their fixed
// latency) and the CPU finish together.
TEST(HybridMoe, TheDeviceShareOfMissesBalancesTheLinkAndTheCpu) {
  constexpr uint64_t kBytes = 3'000'000;
  EXPECT_EQ(device_share_of_misses(6, kBytes, 55, 45), 3u);   // 174 us of copies vs 200 us of CPU
  EXPECT_EQ(device_share_of_misses(6, kBytes, 50, 50), 3u);
  EXPECT_EQ(device_share_of_misses(6, kBytes, 10, 50), 1u);   // a slow link takes few
  EXPECT_EQ(device_share_of_misses(6, kBytes, 60, 20), 5u);   // a weak CPU keeps few
  EXPECT_EQ(device_share_of_misses(1, kBytes, 50, 50), 0u);   // one expert: the copy's latency loses
  EXPECT_EQ(device_share_of_misses(0, kBytes, 50, 50), 0u);
  EXPECT_EQ(device_share_of_misses(6, kBytes, 0, 50), 0u);    // no link
  EXPECT_EQ(device_share_of_misses(6, kBytes, 50, 0), 6u);    // no CPU figure
}

TEST(HybridMoe, PinRefusalsAreRecordedAndTheLayersStagedThroughTheRing) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.n_layer = 4;
  const std::string path = test::temp_path("qwen3moe-pins.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto loaded = Model::load(path, {2});
  ASSERT_TRUE(loaded.ok());
  const Model& model = **loaded;
  auto geometry = read_expert_geometry(model.file());
  ASSERT_TRUE(geometry.ok());
  const uint64_t bank = geometry->layers[0].bank_bytes();
  const uint64_t ring = 2 * geometry->layers[0].bytes_per_expert();
  // Budget for every layer, but the allocator stops after two banks.
  auto state = make_offload(model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), {}, {},
                            geometry->compact_bytes, ring + 2 * bank);
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  const OffloadState& s = **state;
  EXPECT_EQ(s.pins.pinned.size(), 4u);
  EXPECT_EQ(s.store->pinned_bytes(), 2 * bank);
  ASSERT_EQ(s.store->pin_failures().size(), 2u);
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 11 + 3) % model.hparams().n_vocab);
  const std::vector<float> ref = run_steps(model, nullptr, nullptr, ids);
  const std::vector<float> got = run_steps(model, &(*state)->offload, nullptr, ids);
  ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_GT(s.sim->bytes_through_ring(), 0u);
  EXPECT_LT(s.sim->bytes_through_ring(), s.sim->bytes_copied());  // some came from pinned layers
}

TEST(HybridMoe, FullBudgetLruHitsEverythingAfterTheFirstUse) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  const std::string path = test::temp_path("qwen3moe-full.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto loaded = Model::load(path, {2});
  ASSERT_TRUE(loaded.ok());
  const Model& model = **loaded;
  auto geometry = read_expert_geometry(model.file());
  ASSERT_TRUE(geometry.ok());
  auto state = make_offload(model, *geometry, plan_pools(*geometry, geometry->compact_bytes), {}, {});
  ASSERT_TRUE(state.ok());
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 1) % model.hparams().n_vocab);
  DistinctExperts trace;
  run_steps(model, &(*state)->offload, &trace, ids);
  for (uint32_t l = 0; l < model.hparams().n_layer; ++l) {
    std::set<int32_t> seen;
    for (const auto& step : trace.steps) seen.insert(step[l].begin(), step[l].end());
    const CacheCounters& k = (*state)->scheduler->cache().counters(l);
    EXPECT_EQ(k.misses, seen.size()) << "a miss per expert, on its first use only";
    EXPECT_EQ(k.admissions, seen.size());
    EXPECT_EQ(k.evictions, 0u);
  }
}

// Tokens per expert per layer, from the routing trace.
class SelectionCounts : public Trace {
 public:
  explicit SelectionCounts(uint32_t n_expert) : n_expert_(n_expert) {}
  void begin_step() override {}
  void routing(uint32_t layer, uint32_t, std::span<const int32_t> experts, std::span<const float>) override {
    if (counts.size() <= layer) counts.resize(layer + 1, std::vector<uint64_t>(n_expert_, 0));
    for (int32_t e : experts) ++counts[layer][static_cast<size_t>(e)];
  }
  std::vector<std::vector<uint64_t>> counts;

 private:
  uint32_t n_expert_;
};

// The router skew of a --fast synthetic file holds in every layer (the shared direction
// survives the fast embeddings and the residual stream), and the scheduler's
// top_quarter_share reports the routing's popularity exactly as the trace counts it.
TEST(HybridMoe, TheRouterSkewOfAFastFileHoldsInEveryLayerAndIsReported) {
  double shares[2] = {0, 0};
  for (int skewed = 0; skewed < 2; ++skewed) {
    synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
    c.n_layer = 8;
    c.n_expert = 32;
    c.n_expert_used = 4;
    c.n_ff_exp = 64;
    c.n_vocab = 2048;
    c.fast = true;
    c.quant = *synth::parse_quant_mix("q8_0");
    c.router_skew = skewed ? 1.0f : 0.0f;
    const std::string path = test::temp_path(std::string("qwen3moe-skew") + (skewed ? "1" : "0") + ".gguf");
    ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
    auto loaded = Model::load(path, {2});
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const Model& model = **loaded;
    auto geometry = read_expert_geometry(model.file());
    ASSERT_TRUE(geometry.ok());
    auto state = make_offload(model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), {}, {});
    ASSERT_TRUE(state.ok());
    std::vector<int32_t> ids(24 + 232);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 977 + 13) % model.hparams().n_vocab);
    SelectionCounts trace(c.n_expert);
    auto session = Session::create(model, 512);
    ASSERT_TRUE(session.ok());
    session->set_offload(&(*state)->offload);
    std::vector<float> logits;
    ASSERT_TRUE(session->feed({ids.data(), 24}, false, &logits, &trace).ok());
    for (size_t t = 24; t < ids.size(); ++t) ASSERT_TRUE(session->feed({&ids[t], 1}, false, &logits, &trace).ok());

    const ExpertScheduler& s = *(*state)->scheduler;
    ASSERT_EQ(trace.counts.size(), c.n_layer);
    TopShare all;
    for (uint32_t l = 0; l < c.n_layer; ++l) {
      const std::span<const uint64_t> got = s.selections(l);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), trace.counts[l].begin(), trace.counts[l].end())) << "layer " << l;
      const TopShare q = top_share(trace.counts[l], 0.25);
      EXPECT_EQ(q.all, ids.size() * c.n_expert_used);
      const double share = static_cast<double>(q.top) / static_cast<double>(q.all);
      if (skewed) {
        EXPECT_GT(share, 0.6) << "layer " << l;
      } else {
        EXPECT_LT(share, 0.4) << "layer " << l;
      }
      all.top += q.top;
      all.all += q.all;
    }
    shares[skewed] = stats_totals(s).top_quarter_share;
    EXPECT_DOUBLE_EQ(shares[skewed], static_cast<double>(all.top) / static_cast<double>(all.all));
  }
  EXPECT_GT(shares[1], shares[0] + 0.3);
}

// The device's share of a decode step's misses (one token each) goes to the experts
// selected most often so far (split_popular_first), else to the lowest ids.
// The expert geometry of a sparse tiny qwen3moe file (the scheduler needs the geometry only).
StatusOr<ExpertGeometry> tiny_geometry(const synth::SynthConfig& c, const std::string& name) {
  const std::string path = test::temp_path(name);
  MT_RETURN_IF_ERROR(synth::write_model(c, {path, false}).status());
  MT_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  return read_expert_geometry(file);
}

TEST(HybridMoe, TheSplitGivesTheDeviceThePopularMissesFirst) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.sparse = true;
  auto geometry = tiny_geometry(c, "qwen3moe-split-pick.gguf");
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  for (bool popular : {true, false}) {
    SchedulerOptions so;
    so.split_misses = true;
    so.split_fraction = 0.5;
    so.split_popular_first = popular;
    // No slots: every miss the device takes is staged, none becomes a hit later.
    ExpertScheduler s(*geometry, plan_pools(*geometry, 0), c.n_layer, {}, so);
    std::vector<Placement> out;
    for (int step = 0; step < 3; ++step) {
      s.begin_step(1);
      const ExpertTask five[] = {{5, 1}};
      s.place(0, five, out);
    }
    s.begin_step(1);
    out.clear();
    const ExpertTask tasks[] = {{1, 1}, {2, 1}, {5, 1}, {6, 1}};
    s.place(0, tasks, out);
    ASSERT_EQ(out.size(), 4u);
    std::vector<uint32_t> on_device;
    for (const Placement& p : out) {
      if (p.on_device) on_device.push_back(p.expert);
    }
    EXPECT_EQ(on_device, popular ? std::vector<uint32_t>({1, 5}) : std::vector<uint32_t>({1, 2}));
    EXPECT_EQ(s.selections(0)[5], 4u);
  }
}

// learn_costs: the split takes the CPU's measured layer-steps instead of the profile's
// speed. A CPU measured slow hands the device every miss; the profile's fast CPU (beside a
// copy's fixed latency, for experts this small) keeps them all; without the option, or for
// layer-steps of many tokens per expert, the measurements are not used.
TEST(HybridMoe, TheSplitLearnsTheCpuCostFromItsMeasuredLayerSteps) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.sparse = true;
  auto geometry = tiny_geometry(c, "qwen3moe-split-learn.gguf");
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  const ExpertTask tasks[] = {{1, 1}, {2, 1}, {5, 1}, {6, 1}};
  auto device_share = [&](bool learn, uint32_t jobs_per_expert) {
    SchedulerOptions so;
    so.split_misses = true;
    so.learn_costs = learn;
    ExpertScheduler s(*geometry, plan_pools(*geometry, 0), c.n_layer, {}, so);
    for (int i = 0; i < 64; ++i) s.observe_cpu(0, 2 + i % 8, (2 + i % 8) * jobs_per_expert, (2 + i % 8) * 1e-3);
    s.begin_step(1);
    std::vector<Placement> out;
    s.place(0, tasks, out);
    uint32_t n = 0;
    for (const Placement& p : out) n += p.on_device ? 1 : 0;
    return n;
  };
  EXPECT_EQ(device_share(false, 1), 0u);
  EXPECT_EQ(device_share(true, 1), 4u);
  EXPECT_EQ(device_share(true, 3), 0u);  // prefill-like layer-steps: flops, not bytes
}

// The device's side learned too (its share's time from the copies' issue to its products'
// end): a device measured slower per miss than the CPU keeps only the share that balances.
TEST(HybridMoe, TheSplitLearnsTheDeviceCostToo) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.sparse = true;
  auto geometry = tiny_geometry(c, "qwen3moe-split-learn-device.gguf");
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  const ExpertTask tasks[] = {{1, 1}, {2, 1}, {5, 1}, {6, 1}};
  SchedulerOptions so;
  so.split_misses = true;
  so.learn_costs = true;
  ExpertScheduler s(*geometry, plan_pools(*geometry, 0), c.n_layer, {}, so);
  auto device_share = [&] {
    s.begin_step(1);
    std::vector<Placement> out;
    s.place(0, tasks, out);
    uint32_t n = 0;
    for (const Placement& p : out) n += p.on_device ? 1 : 0;
    return n;
  };
  for (int i = 0; i < 64; ++i) s.observe_cpu(0, 2 + i % 8, 2 + i % 8, (2 + i % 8) * 1e-3);  // 1 ms per expert
  EXPECT_EQ(device_share(), 4u) << "the profile's link, far faster than this CPU";
  // 100 us for the hits + 2 ms per miss: m = 1 balances (2.1 ms against 3 ms on the CPU).
  for (int i = 0; i < 64; ++i) s.observe_device(0, i % 8, 100e-6 + (i % 8) * 2e-3);
  ASSERT_TRUE(s.device_fit().ready());
  EXPECT_NEAR(s.device_fit().cost().fixed_s, 100e-6, 1e-9);
  EXPECT_EQ(device_share(), 1u);
}

// The executor hands the device's measured share time to the scheduler for the layer's
// last layer-step only when that step was decode-like (at most 2 selections per distinct
// expert), and once per layer-step.
TEST(HybridMoe, TheExecutorGivesTheDeviceTimeOfDecodeLayerStepsOnly) {
  struct NoDevice final : ExpertDevice {
    std::vector<float> rows;
    void copy_to_slot(uint32_t, uint32_t, int32_t) override {}
    void wait_copies(uint32_t) override {}
    void stage(uint32_t, std::span<const uint32_t>) override {}
    void compute(const DeviceGroup&) override {}
    float* cpu_rows(size_t n) override {
      rows.resize(n * 4096);
      return rows.data();
    }
    void finish(const DeviceGroup&, std::span<const int32_t>, const float*) override {}
  } device;
  struct NoCpu final : CpuExperts {
    void compute(uint32_t, const float*, uint32_t, std::span<const ExpertJob>, float*) override {}
  } cpu;
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.sparse = true;
  auto geometry = tiny_geometry(c, "qwen3moe-executor-learn.gguf");
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  SchedulerOptions so;
  so.split_misses = true;
  so.learn_costs = true;
  ExpertScheduler s(*geometry, plan_pools(*geometry, 0), c.n_layer, {}, so);
  TieredExecutor ex(s, device, cpu, c.n_layer);
  const uint32_t k = c.n_expert_used, layer = geometry->layers[0].layer;
  std::vector<float> h(16 * static_cast<size_t>(c.n_embd), 0.0f);
  auto run = [&](uint32_t n_tokens) {
    std::vector<int32_t> sel(n_tokens * k);
    for (uint32_t i = 0; i < sel.size(); ++i) sel[i] = static_cast<int32_t>(n_tokens == 1 ? i : i % k);  // 1 token: k experts; many: the same k
    s.begin_step(n_tokens);
    ex.run({layer, n_tokens, k, sel.data(), h.data()});
  };
  run(1);
  ex.observe_device(layer, 1e-3);
  ex.observe_device(layer, 1e-3);  // no layer-step since: not a sample
  EXPECT_EQ(s.device_fit().samples(), 1u);
  run(8);  // 8 tokens on the same k experts: prefill-like
  ex.observe_device(layer, 1e-3);
  EXPECT_EQ(s.device_fit().samples(), 1u);
}

// The roofline of tiered decode: (CPU experts' bytes + bytes copied) per token over host
// read + pinned link bandwidth, from the scheduler's own counters and the profile.
TEST(HybridMoe, TheRooflineIsTheCrossingBytesOverHostPlusLinkBandwidth) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.sparse = true;
  auto geometry = tiny_geometry(c, "qwen3moe-roofline.gguf");
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  SchedulerOptions so;
  so.split_misses = true;
  so.split_fraction = 0.5;
  ExpertScheduler s(*geometry, plan_pools(*geometry, 0), c.n_layer, {}, so);
  HwProfile hw = default_hw_profile();
  hw.host_read = {{1, 10.0}, {8, 40.0}};
  hw.has_gpu = true;
  hw.gpu.h2d = {{1024, 5.0, 1.0}, {1ull << 30, 20.0, 4.0}};
  const TierRoofline none = tier_roofline(s, hw);
  EXPECT_EQ(none.tokens_per_s, 0.0);  // no token yet
  std::vector<Placement> out;
  for (int step = 0; step < 4; ++step) {
    s.begin_step(1);
    const ExpertTask tasks[] = {{1, 1}, {2, 1}, {5, 1}, {6, 1}};
    for (uint32_t l = 0; l < c.n_layer; ++l) {
      if (s.expert_bytes(l) > 0) s.place(l, tasks, out);
    }
  }
  double cpu_bytes = 0;
  for (uint32_t l = 0; l < c.n_layer; ++l) cpu_bytes += static_cast<double>(s.counters(l).cpu_experts * s.expert_bytes(l));
  const StatsTotals t = stats_totals(s);
  ASSERT_GT(cpu_bytes, 0);
  ASSERT_GT(t.h2d_bytes_per_token, 0);
  const TierRoofline r = tier_roofline(s, hw);
  EXPECT_DOUBLE_EQ(r.cpu_bytes_per_token, cpu_bytes / 4);
  EXPECT_DOUBLE_EQ(r.h2d_bytes_per_token, t.h2d_bytes_per_token);
  EXPECT_DOUBLE_EQ(r.host_gbps, 40.0);
  EXPECT_GT(r.link_gbps, 5.0);
  EXPECT_LT(r.link_gbps, 20.0);
  EXPECT_NEAR(r.tokens_per_s, 1e9 * (r.host_gbps + r.link_gbps) / (r.cpu_bytes_per_token + r.h2d_bytes_per_token), 1e-6);
  EXPECT_FALSE(r.host_measured);  // the assumed profile's host figures, edited
  EXPECT_FALSE(r.link_measured);   // its GPU is named "assumed: ..."
  const std::string text = tier_roofline_text(r, r.tokens_per_s / 4);
  EXPECT_NE(text.find("is 25.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("host 40.0 GB/s assumed"), std::string::npos) << text;
  const std::string json = tier_roofline_json(r, r.tokens_per_s / 4);
  EXPECT_NE(json.find("\"fraction\":0.25"), std::string::npos) << json;
  hw.source = "measured";
  hw.gpu.name = "NVIDIA H100 80GB HBM3";
  const TierRoofline m = tier_roofline(s, hw);
  EXPECT_TRUE(m.host_measured && m.link_measured);
  EXPECT_NE(tier_roofline_text(m, 1.0).find("measured + link"), std::string::npos);
}

// Of 8 experts, the top quarter (2, rounded up) of the selections.
TEST(HybridMoe, TopShareTakesTheMostSelectedFraction) {
  const std::vector<uint64_t> counts = {5, 0, 9, 1, 1, 3, 0, 1};
  const TopShare q = top_share(counts, 0.25);
  EXPECT_EQ(q.top, 14u);
  EXPECT_EQ(q.all, 20u);
  EXPECT_EQ(top_share(counts, 0.3).top, 17u);  // 2.4 -> 3 experts
  EXPECT_EQ(top_share(std::vector<uint64_t>{}, 0.25).all, 0u);
}

}  // namespace
}  // namespace mt
