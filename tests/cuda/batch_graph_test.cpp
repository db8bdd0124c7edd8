// Batched decode graphs (cuda/batch_graph.h): the eight-sequences schedule of the batch
// tests with the graphs on gives each sequence its logits alone (within the same bounds as
// plain batched launches) and takes the graph for its decode-only steps; decoding three
// sequences together across a span of positions (256) recaptures the graph and stays
// within 1e-4 (F32) of the same steps launched plainly; one sequence's 5-token verification
// steps through the graph's rows give the plain logits, and their argmax alone (eval_argmax,
// reduced on the device) is the scalar pick of those logits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_schedule.h"
#include "core/row_argmax.h"
#include "batch_schedule.h"
#include "cuda/batch_graph.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda_test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

// Graphs on for one test, back to the process's setting after.
struct GraphsOn {
  explicit GraphsOn(bool on) : before(BatchGraphs::wanted()) { BatchGraphs::set_wanted(on); }
  ~GraphsOn() { BatchGraphs::set_wanted(before); }
  bool before;
};

TEST(CudaBatchGraph, EightSequencesTogetherGiveEachSequenceAlone) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kGptOss}) {
    for (const char* quant : {"f32", "q4_k_m"}) {
      SCOPED_TRACE(std::string(arch_info(arch).name) + " " + quant);
      auto host = test::load_tiny(arch, quant, "batch-graph");
      ASSERT_TRUE(host.ok()) << host.status().to_string();
      auto gpu = CudaModel::load(**host);
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      CudaBackend backend(**gpu);
      const mt::test::Rows alone = mt::test::run_alone(backend);
      GraphsOn on(true);
      const uint64_t before = BatchGraphs::replays_total();
      const mt::test::Rows together = mt::test::run_together(backend);
      EXPECT_GT(BatchGraphs::replays_total(), before) << "no decode-only step took a batch graph";
      mt::test::expect_same(together, alone, backend.n_vocab(), std::string(quant) == "f32" ? 1e-4 : 2e-2);
    }
  }
}

// Three sequences of 250-token prompts, then 12 decode steps together (positions 250..261:
// the span ends at 256, so the graph is captured twice), plain then with graphs.
std::vector<std::vector<float>> decode_three(CudaBackend& backend) {
  const uint32_t V = backend.n_vocab();
  std::vector<SeqId> ids;
  for (uint32_t s = 0; s < 3; ++s) {
    auto id = backend.create_sequence(300);
    EXPECT_TRUE(id.ok());
    ids.push_back(*id);
    Batch b;
    const std::vector<int32_t> p = mt::test::ids(250, 70 + s, V);
    for (uint32_t i = 0; i < p.size(); ++i) b.add(*id, i, p[i], false);
    std::vector<float> lg;
    EXPECT_TRUE(backend.eval(b, &lg).ok());
  }
  std::vector<std::vector<float>> out;
  for (uint32_t k = 0; k < 12; ++k) {
    Batch b;
    for (uint32_t s = 0; s < 3; ++s) b.add(ids[s], 250 + k, static_cast<int32_t>((s * 37 + k * 11 + 5) % V), true);
    std::vector<float> lg;
    const Status st = backend.eval(b, &lg);
    EXPECT_TRUE(st.ok()) << st.to_string();
    out.push_back(lg);
  }
  for (SeqId id : ids) backend.free_sequence(id);
  return out;
}

TEST(CudaBatchGraph, ASpanOfPositionsEndsAndTheGraphIsCapturedAgain) {
  MT_SKIP_WITHOUT_DEVICE();
  auto host = test::load_tiny(Arch::kQwen3Moe, "f32", "batch-graph-span");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::load(**host);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  CudaBackend backend(**gpu);
  const uint32_t V = backend.n_vocab();
  const auto plain = decode_three(backend);
  GraphsOn on(true);
  const uint64_t before = BatchGraphs::replays_total();
  const auto graphed = decode_three(backend);
  EXPECT_EQ(BatchGraphs::replays_total() - before, 12u);
  ASSERT_EQ(graphed.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    ASSERT_EQ(graphed[k].size(), plain[k].size());
    for (size_t r = 0; r * V < plain[k].size(); ++r) {
      EXPECT_LE(mt::test::rel(graphed[k].data() + r * V, plain[k].data() + r * V, V), 1e-4) << "step " << k << " row " << r;
    }
  }
}

// One sequence's few tokens with every row's logits (a verification of guesses): 40 prompt
// tokens, then 4 steps of 5 tokens and one decode token, plain then through the batch
// graph's rows (one per token at consecutive positions of the sequence). With ids, each
// step is eval_argmax's instead, its picks appended to *ids (the logits then empty).
std::vector<std::vector<float>> verify_steps(CudaBackend& backend, std::vector<int32_t>* ids = nullptr) {
  const uint32_t V = backend.n_vocab();
  auto id = backend.create_sequence(128);
  EXPECT_TRUE(id.ok());
  std::vector<std::vector<float>> out;
  Batch prompt;
  const std::vector<int32_t> p = mt::test::ids(40, 91, V);
  for (uint32_t i = 0; i < p.size(); ++i) prompt.add(*id, i, p[i], false);
  std::vector<float> lg;
  EXPECT_TRUE(backend.eval(prompt, &lg).ok());
  uint32_t pos = 40;
  for (uint32_t k = 0; k < 5; ++k) {
    const uint32_t n = k < 4 ? 5 : 1;
    Batch b;
    for (uint32_t i = 0; i < n; ++i, ++pos) b.add(*id, pos, static_cast<int32_t>((k * 53 + i * 7 + 3) % V), true);
    std::vector<int32_t> picked;
    const Status st = ids != nullptr ? backend.eval_argmax(b, &picked) : backend.eval(b, &lg);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (ids != nullptr) {
      EXPECT_EQ(picked.size(), n);
      ids->insert(ids->end(), picked.begin(), picked.end());
    }
    out.push_back(ids != nullptr ? std::vector<float>{} : lg);
  }
  backend.free_sequence(*id);
  return out;
}

TEST(CudaBatchGraph, OneSequencesVerificationRowsGiveThePlainLogits) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kGptOss}) {
    SCOPED_TRACE(arch_info(arch).name);
    auto host = test::load_tiny(arch, "f32", "batch-graph-verify");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    CudaBackend backend(**gpu);
    const uint32_t V = backend.n_vocab();
    std::vector<std::vector<float>> plain;
    {
      GraphsOn off(false);
      plain = verify_steps(backend);
    }
    GraphsOn on(true);
    const uint64_t before = BatchGraphs::replays_total();
    const auto graphed = verify_steps(backend);
    EXPECT_EQ(BatchGraphs::replays_total() - before, 4u) << "each 5-token step one replay";
    ASSERT_EQ(graphed.size(), plain.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      ASSERT_EQ(graphed[k].size(), plain[k].size());
      for (size_t r = 0; r * V < plain[k].size(); ++r) {
        EXPECT_LE(mt::test::rel(graphed[k].data() + r * V, plain[k].data() + r * V, V), 1e-4) << "step " << k << " row " << r;
      }
    }
  }
}

TEST(CudaBatchGraph, VerificationArgmaxOnTheDeviceIsThePickOfTheLogits) {
  MT_SKIP_WITHOUT_DEVICE();
  for (const char* quant : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(quant);
    auto host = test::load_tiny(Arch::kQwen3Moe, quant, "batch-graph-argmax");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    CudaBackend backend(**gpu);
    const uint32_t V = backend.n_vocab();
    GraphsOn on(true);
    const auto logits = verify_steps(backend);
    std::vector<int32_t> want;
    for (const auto& step : logits) {
      for (size_t r = 0; r * V < step.size(); ++r) want.push_back(row_argmax({step.data() + r * V, V}));
    }
    const uint64_t before = BatchGraphs::replays_total();
    std::vector<int32_t> got;
    verify_steps(backend, &got);
    EXPECT_EQ(BatchGraphs::replays_total() - before, 4u) << "each 5-token step one replay, reduced on the device";
    EXPECT_EQ(got, want) << "the same graph's logits, their argmax on the host";
  }
}

}  // namespace
}  // namespace mt::cuda
