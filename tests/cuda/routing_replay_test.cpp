// Routing replay on the GPU (cuda/routing_replay_stage.h, experts/routing_replay.h): under
// the same synth stream, CudaBackend computes the stream's experts (the routing it reports
// is the stream's, in row order per MoE layer, through a batch of two sequences) and gives
// the CPU backend's logits within the F32 parity bound (1e-3), which differ from the
// router's own; a Trace that wants no routing back (bench's) gives the same logits; tiered
// (kjv-moe, 25% of the experts) computes the same experts as resident, its cache looking
// up exactly the stream's experts, logits within the quantized bound (2e-2).
#include <gtest/gtest.h>

#include <set>

#include "backend_schedule.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda/tiering.h"
#include "cuda_test_util.h"
#include "experts/geometry.h"
#include "experts/routing_replay.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda {
namespace {

class Recorder final : public Trace {
 public:
  Recorder(RoutingReplay* replay, bool want) : replay_(replay), want_(want) {}
  RoutingReplay* routing_override() override { return replay_; }
  bool wants_routing() const override { return want_; }
  void begin_step() override { distinct.emplace_back(); }
  void routing(uint32_t layer, uint32_t, std::span<const int32_t> e, std::span<const float>) override {
    if (ids.size() <= layer) ids.resize(layer + 1);
    ids[layer].push_back({e.begin(), e.end()});
    if (distinct.empty()) distinct.emplace_back();
    if (distinct.back().size() <= layer) distinct.back().resize(layer + 1);
    distinct.back()[layer].insert(e.begin(), e.end());
  }
  std::vector<std::vector<std::vector<int32_t>>> ids;    // [layer][row]
  std::vector<std::vector<std::set<int32_t>>> distinct;  // [step][layer]

 private:
  RoutingReplay* replay_;
  bool want_;
};

ReplayGeometry geometry_of(const Model& m) {
  ReplayGeometry g{{}, m.hparams().n_expert, m.hparams().n_expert_used};
  for (uint32_t l = 0; l < m.hparams().n_layer; ++l) {
    if (m.weights().layers[l].is_moe()) g.moe_blocks.push_back(l);
  }
  return g;
}

constexpr const char* kSpec = "synth:reuse=0.5,window=4,within=0.7,skew=0.8,seed=3";

// Two sequences: a batch of A's 7 prompt tokens and B's 4, then 5 steps of one token each
// (A then B); every asked row's logits (the last of each run) appended.
std::vector<float> two_sequences(Backend& b, Trace* trace) {
  const uint32_t V = b.n_vocab();
  auto a = b.create_sequence(32);
  auto c = b.create_sequence(32);
  EXPECT_TRUE(a.ok() && c.ok());
  std::vector<float> all, out;
  Batch batch;
  std::vector<int32_t> pa(7), pc(4);
  for (size_t i = 0; i < pa.size(); ++i) pa[i] = static_cast<int32_t>((i * 37 + 5) % V);
  for (size_t i = 0; i < pc.size(); ++i) pc[i] = static_cast<int32_t>((i * 53 + 9) % V);
  batch.add(*a, 0, pa, Logits::kLast);
  batch.add(*c, 0, pc, Logits::kLast);
  EXPECT_TRUE(b.eval(batch, &out, trace).ok());
  all = out;
  for (uint32_t s = 0; s < 5; ++s) {
    batch.clear();
    batch.add(*a, 7 + s, static_cast<int32_t>((s * 11 + 1) % V), true);
    batch.add(*c, 4 + s, static_cast<int32_t>((s * 13 + 2) % V), true);
    EXPECT_TRUE(b.eval(batch, &out, trace).ok());
    all.insert(all.end(), out.begin(), out.end());
  }
  b.free_sequence(*a);
  b.free_sequence(*c);
  return all;
}

double max_rel(const std::vector<float>& got, const std::vector<float>& ref, uint32_t V) {
  double worst = 0;
  for (size_t r = 0; r + V <= ref.size(); r += V) worst = std::max(worst, mt::test::rel(&got[r], &ref[r], V));
  return worst;
}

TEST(CudaRoutingReplay, ResidentComputesTheStreamsExpertsAsTheCpuDoes) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("f32");
  const std::string path = mt::test::temp_path("qwen3moe-cuda-replay.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto host = Model::load(path, {0, false});
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  const ReplayGeometry g = geometry_of(**host);
  auto gpu = CudaModel::load(**host);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  CudaBackend cuda(**gpu);
  CpuBackend cpu(**host);
  const uint32_t V = cuda.n_vocab();

  auto cpu_replay = RoutingReplay::create(kSpec, g);
  auto gpu_replay = RoutingReplay::create(kSpec, g);
  auto quiet_replay = RoutingReplay::create(kSpec, g);
  ASSERT_TRUE(cpu_replay.ok() && gpu_replay.ok() && quiet_replay.ok());
  Recorder on_cpu(cpu_replay->get(), true), on_gpu(gpu_replay->get(), true), quiet(quiet_replay->get(), false);
  Recorder own(nullptr, true);
  const std::vector<float> ref = two_sequences(cpu, &on_cpu);
  const std::vector<float> got = two_sequences(cuda, &on_gpu);
  const std::vector<float> got_quiet = two_sequences(cuda, &quiet);
  const std::vector<float> router = two_sequences(cuda, &own);

  RoutingGenParams p;
  p.n_layers = static_cast<uint32_t>(g.moe_blocks.size()), p.n_expert = g.n_expert, p.top_k = g.top_k;
  p.reuse = 0.5, p.window = 4, p.within = 0.7, p.skew = 0.8, p.seed = 3;
  RoutingGenerator gen(p);
  for (uint32_t i = 0; i < g.moe_blocks.size(); ++i) {
    const uint32_t l = g.moe_blocks[i];
    ASSERT_EQ(on_gpu.ids.at(l).size(), 11u + 10u);
    for (const std::vector<int32_t>& row : on_gpu.ids[l]) EXPECT_EQ(row, gen.next(i)) << "layer " << l;
  }
  EXPECT_EQ(on_gpu.ids, on_cpu.ids);
  EXPECT_TRUE(quiet.ids.empty());  // nothing copied back
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_LE(max_rel(got, ref, V), 1e-3);
  EXPECT_EQ(got_quiet, got);
  EXPECT_GT(max_rel(router, got, V), 1e-2) << "the router's own experts were computed";
}

TEST(CudaRoutingReplay, TieredComputesTheStreamsExperts) {
  MT_SKIP_WITHOUT_DEVICE();
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind("/tests/")) + "/models/kjv-moe-f16.gguf";
  auto resident_host = Model::load(path, {0, false});
  ASSERT_TRUE(resident_host.ok()) << resident_host.status().to_string();
  const ReplayGeometry g = geometry_of(**resident_host);
  auto resident = CudaModel::load(**resident_host);
  ASSERT_TRUE(resident.ok());
  CudaBackend resident_backend(**resident);
  auto r0 = RoutingReplay::create(kSpec, g);
  ASSERT_TRUE(r0.ok());
  Recorder on_resident(r0->get(), true);
  const std::vector<float> ref = two_sequences(resident_backend, &on_resident);

  LoadOptions lo{0, true};
  lo.interleave_experts_only = true;
  auto host = Model::load(path, lo);
  ASSERT_TRUE(host.ok());
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  CudaOptions options;
  options.experts_on_host = true;
  auto tiered = CudaModel::load(**host, options);
  ASSERT_TRUE(tiered.ok()) << tiered.status().to_string();
  auto tier = make_cuda_tiering(**host, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), {}, {}, {},
                                std::make_unique<ModelCpuExperts>(**host));
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  (*tiered)->set_tiering(tier->get());
  {
    CudaBackend backend(**tiered);
    auto r1 = RoutingReplay::create(kSpec, g);
    ASSERT_TRUE(r1.ok());
    Recorder on_tiered(r1->get(), true);
    const std::vector<float> got = two_sequences(backend, &on_tiered);
    EXPECT_EQ(on_tiered.ids, on_resident.ids);
    EXPECT_LE(max_rel(got, ref, backend.n_vocab()), 2e-2);
    const ExpertScheduler& s = *(*tier)->scheduler;
    for (uint32_t l : g.moe_blocks) {
      uint64_t distinct = 0;
      for (const auto& step : on_tiered.distinct) distinct += l < step.size() ? step[l].size() : 0;
      const CacheCounters& k = s.cache().counters(l);
      EXPECT_EQ(k.hits + k.misses, distinct) << "layer " << l;
    }
  }
  (*tiered)->set_tiering(nullptr);
}

}  // namespace
}  // namespace mt::cuda
