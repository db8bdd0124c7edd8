// The CUDA twin of the backend's three-sequences test (tests/unit/backend_test.cpp): the
// same schedule through CudaBackend on F32-weight synthetic models gives, per sequence, the
// logits of evaluating it alone (<= 1e-4: one pass over every sequence's rows, other
// kernels than a single token's), and the CPU backend's within the CUDA parity
// bound for F32 weights (1e-3, cuda_model_test.cpp); a fork decodes as the original, a
// truncation to 0 starts over, bad input is a Status.
#include <gtest/gtest.h>

#include "backend_schedule.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda_test_util.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda {
namespace {

TEST(CudaBackend, ThreeSequencesInOneCallGiveEachSequenceAlone) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen35Moe}) {
    SCOPED_TRACE(arch_info(arch).name);
    synth::SynthConfig c = synth::tiny_for(arch);
    c.quant = *synth::parse_quant_mix("f32");
    const std::string path = mt::test::temp_path(std::string(arch_info(arch).name) + "-cuda-backend.gguf");
    ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
    auto host = Model::load(path, {0, false});
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    CudaBackend backend(**gpu);
    const uint32_t V = backend.n_vocab();
    auto together = mt::test::run_schedule(backend, true);
    auto alone = mt::test::run_schedule(backend, false);
    CpuBackend cpu(**host);
    auto reference = mt::test::run_schedule(cpu, false);
    for (size_t s = 0; s < 3; ++s) {
      ASSERT_EQ(together[s].size(), alone[s].size());
      ASSERT_EQ(together[s].size(), reference[s].size());
      for (size_t r = 0; r < alone[s].size(); ++r) {
        EXPECT_LE(mt::test::rel(together[s][r].data(), alone[s][r].data(), V), 1e-4) << "sequence " << s << " row " << r;
        EXPECT_LE(mt::test::rel(together[s][r].data(), reference[s][r].data(), V), 1e-3) << "sequence " << s << " row " << r;
      }
    }
    // Fork and truncation through the CUDA model's device copies.
    auto seq = Sequence::create(backend, 16);
    ASSERT_TRUE(seq.ok());
    std::vector<float> scratch, original, forked;
    ASSERT_TRUE(seq->feed(mt::test::ids(6, 7, V), false, &scratch).ok());
    auto fork = backend.fork_sequence(seq->id());
    ASSERT_TRUE(fork.ok()) << fork.status().to_string();
    EXPECT_EQ(backend.position(*fork), 6u);
    const int32_t next = 3;
    ASSERT_TRUE(seq->feed({&next, 1}, false, &original).ok());
    Batch b;
    b.add(*fork, 6, next, true);
    ASSERT_TRUE(backend.eval(b, &forked).ok());
    EXPECT_EQ(forked, original) << "a fork decodes as the original";
    ASSERT_TRUE(backend.truncate_sequence(*fork, 0).ok());
    EXPECT_EQ(backend.position(*fork), 0u);
    b.clear();
    b.add(*fork, 0, static_cast<int32_t>(V), true);
    EXPECT_EQ(backend.eval(b, &forked).code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(backend.fork_sequence(999).ok());
    backend.free_sequence(*fork);
  }
}

}  // namespace
}  // namespace mt::cuda
