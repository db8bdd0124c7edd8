// The CPU twin of tests/cuda/batch_test.cpp: eight sequences of different prompt lengths
// decoded together through CpuBackend (prompt chunks and decode tokens sharing calls; the
// schedule of batch_schedule.h) give each sequence the logits of decoding it alone within
// the parity bounds (F32 1e-4, quantized 2e-2 relative), for every family of mixer
// (grouped-query attention with and without sinks and windows, Gated DeltaNet, latent
// attention), resident and with the experts tiered over the simulated device.
#include <gtest/gtest.h>

#include <string>

#include "batch_schedule.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

std::string write_tiny(Arch arch, const char* quant) {
  synth::SynthConfig c = synth::tiny_for(arch);
  c.quant = *synth::parse_quant_mix(quant);
  const std::string path = test::temp_path(std::string(arch_info(arch).name) + "-" + quant + "-batch.gguf");
  EXPECT_TRUE(synth::write_model(c, {path, false}).ok());
  return path;
}

TEST(CpuBatch, EightSequencesTogetherGiveEachSequenceAlone) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kGptOss, Arch::kQwen35Moe, Arch::kDeepseek2}) {
    for (const char* quant : {"f32", "q4_k_m"}) {
      SCOPED_TRACE(std::string(arch_info(arch).name) + " " + quant);
      auto model = Model::load(write_tiny(arch, quant), {2});
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      CpuBackend backend(**model);
      const test::Rows alone = test::run_alone(backend);
      const test::Rows together = test::run_together(backend);
      test::expect_same(together, alone, backend.n_vocab(), std::string(quant) == "f32" ? 1e-4 : 2e-2);
    }
  }
}

TEST(CpuBatch, EightSequencesTogetherGiveEachSequenceAloneTiered) {
  auto model = Model::load(write_tiny(Arch::kQwen3Moe, "q4_k_m"), {2});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CpuBackend backend(**model);
  const test::Rows resident = test::run_alone(backend);
  auto geometry = read_expert_geometry((*model)->file());
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  SchedulerOptions so;
  so.max_admissions = 2;
  auto tiering = make_offload(**model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{}, so);
  ASSERT_TRUE(tiering.ok()) << tiering.status().to_string();
  backend.set_offload(&(*tiering)->offload);
  const test::Rows alone = test::run_alone(backend);
  const test::Rows together = test::run_together(backend);
  test::expect_same(together, alone, backend.n_vocab(), 2e-2);
  test::expect_same(alone, resident, backend.n_vocab(), 2e-2);
}

}  // namespace
}  // namespace mt
