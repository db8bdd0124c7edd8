// The CUDA twin of tests/unit/speculative_test.cpp: speculative decoding through
// CudaBackend (verification runs of 2-9 tokens through the batched pass, rejected guesses
// truncated) gives plain greedy decoding's 64 tokens, resident for grouped-query attention
// with and without sinks and latent attention in F32 and q4_k_m, and with tiered experts,
// for the scripted drafter at draft lengths 1-8 and prompt lookup, except at a near tie of
// the plain logits (F32: none allowed).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend_schedule.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda/tiering.h"
#include "cuda_test_util.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "model/model.h"
#include "model/offload.h"
#include "spec_check.h"
#include "synth/synth.h"
#include "test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

using namespace mt::test::spec;

// Every length with the scripted drafter (p 0.7), lookup at 3 and adaptive; returns the
// near-tie count.
int check_drafters(Backend& backend, double tie, const std::string& name) {
  const std::vector<int32_t> prompt = mt::test::ids(12, 5, backend.n_vocab());
  const Plain plain = plain_greedy(backend, prompt, 64);
  const std::vector<int32_t> reference = script_of(prompt, plain.tokens);
  int ties = 0;
  for (int length = 1; length <= 8; ++length) {
    SpecConfig config;
    config.draft_max = length;
    config.adaptive = false;
    ScriptedDrafter scripted(reference, 0.7, backend.n_vocab(), 7 + static_cast<uint64_t>(length));
    ties += expect_greedy_parity(plain, spec_decode(backend, scripted, config, prompt, 64, greedy_params()), tie,
                                 name + " scripted length " + std::to_string(length));
  }
  SpecConfig fixed3;
  fixed3.draft_max = 3;
  fixed3.adaptive = false;
  LookupDrafter lookup(3, 1);
  ties += expect_greedy_parity(plain, spec_decode(backend, lookup, fixed3, prompt, 64, greedy_params()), tie, name + " lookup");
  LookupDrafter adaptive(2, 1);
  ties += expect_greedy_parity(plain, spec_decode(backend, adaptive, SpecConfig{}, prompt, 64, greedy_params()), tie,
                               name + " lookup adaptive");
  return ties;
}

// check_drafters on a tiny resident model of `arch` at `quant` (no near tie at f32), then
// `more` on the same backend.
void check_resident(Arch arch, const char* quant, const std::function<void(CudaBackend&)>& more = {}) {
  const std::string name = std::string(arch_info(arch).name) + " " + quant;
  SCOPED_TRACE(name);
  auto host = test::load_tiny(arch, quant, "spec");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::load(**host);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  CudaBackend backend(**gpu);
  const bool f32 = std::string(quant) == "f32";
  const int ties = check_drafters(backend, f32 ? 2e-4 : 4e-2, name);
  if (f32) {
    EXPECT_EQ(ties, 0) << name;
  }
  if (more) more(backend);
}

TEST(CudaSpeculative, GreedyEqualsPlainDecodingResident) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kGptOss, Arch::kDeepseek2, Arch::kGlm4Moe}) {
    for (const char* quant : {"f32", "q4_k_m"}) check_resident(arch, quant);
  }
}

// A recurrent sequence goes back into its last logged run only: before it, refused naming
// the run; inside it, to the position asked.
void truncate_goes_back_into_the_logged_run_only(CudaBackend& backend) {
  auto seq = backend.create_sequence(64);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(backend.keep_run_rollback(*seq, 8).ok());
  Batch batch;
  std::vector<float> logits;
  batch.add(*seq, 0, mt::test::ids(8, 3, backend.n_vocab()), Logits::kLast);
  ASSERT_TRUE(backend.eval(batch, &logits).ok());  // 8 tokens: logged (max_run 8)
  batch.clear();
  batch.add(*seq, 8, mt::test::ids(4, 4, backend.n_vocab()), Logits::kAll);
  ASSERT_TRUE(backend.eval(batch, &logits).ok());  // positions 8-11, logged
  const Status before = backend.truncate_sequence(*seq, 6);
  EXPECT_FALSE(before.ok());
  EXPECT_NE(before.message().find("positions 8 to 12"), std::string::npos) << before.to_string();
  EXPECT_TRUE(backend.truncate_sequence(*seq, 10).ok());
  EXPECT_EQ(backend.position(*seq), 10u);
  backend.free_sequence(*seq);
}

// Gated DeltaNet hybrids: a verification run is logged (CudaBackend::keep_run_rollback) and a
// rejected guess cut back through the recurrent states (CudaSequence::rollback_run): the
// same greedy tokens at every length; a truncate outside the logged run is refused.
TEST(CudaSpeculative, GreedyEqualsPlainDecodingRecurrent) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen35Moe, Arch::kQwen3Next}) {
    for (const char* quant : {"f32", "q4_k_m"}) check_resident(arch, quant, truncate_goes_back_into_the_logged_run_only);
  }
}

TEST(CudaSpeculative, GreedyEqualsPlainDecodingTiered) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  const std::string path = mt::test::temp_path("spec-tiered.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  LoadOptions lo{0, false};
  lo.interleave_experts_only = true;
  auto host = Model::load(path, lo);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  CudaOptions options;
  options.experts_on_host = true;
  auto gpu = CudaModel::load(**host, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  CudaTieringOptions to;
  to.pin_budget = geometry->compact_bytes / 2;
  SchedulerOptions so;
  so.max_admissions = 2;
  auto tier = make_cuda_tiering(**host, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{}, so,
                                to, std::make_unique<ModelCpuExperts>(**host));
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  (*gpu)->set_tiering(tier->get());
  CudaBackend backend(**gpu);
  check_drafters(backend, 4e-2, "qwen3moe q4_k_m tiered");
}

}  // namespace
}  // namespace mt::cuda
