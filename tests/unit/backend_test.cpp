// The batched backend interface on the CPU (CpuBackend): three sequences of different
// lengths evaluated in shared calls (prompts, a prompt chunk next to other sequences'
// decode tokens, runs in any order) give each sequence's logits alone; a fork continues as
// the original; truncation and re-evaluation reproduce the logits; bad input is a Status
// that moves nothing. F32 weights: the batch's shared products change only rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "backend_schedule.h"
#include "core/row_argmax.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

using test::ids;
using test::rel;
using test::run_schedule;

std::unique_ptr<Model> synth_model(Arch arch, const char* quant) {
  synth::SynthConfig c = synth::tiny_for(arch);
  c.quant = *synth::parse_quant_mix(quant);
  const std::string path = test::temp_path(std::string(arch_info(arch).name) + "-" + quant + "-backend.gguf");
  EXPECT_TRUE(synth::write_model(c, {path, false}).ok());
  auto m = Model::load(path, {2});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(CpuBackend, ThreeSequencesInOneCallGiveEachSequenceAlone) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen35Moe}) {
    auto model = synth_model(arch, "f32");
    ASSERT_NE(model, nullptr);
    CpuBackend backend(*model);
    const uint32_t V = backend.n_vocab();
    auto together = run_schedule(backend, true);
    auto alone = run_schedule(backend, false);
    for (size_t s = 0; s < 3; ++s) {
      ASSERT_EQ(together[s].size(), alone[s].size());
      ASSERT_EQ(together[s].size(), s == 0 ? 7u : s == 1 ? 11u : 5u);
      for (size_t r = 0; r < alone[s].size(); ++r) {
        EXPECT_LE(rel(together[s][r].data(), alone[s][r].data(), V), 1e-5)
            << arch_info(arch).name << " sequence " << s << " row " << r;
      }
    }
  }
}

// Forks taken after a prompt: one continues exactly as a sequence never forked, the other
// diverges without touching the original (recurrent states are copied too).
// eval_argmax (the default: eval, then each asked row's row_argmax) advances the sequence
// as eval does and returns the argmax of the rows eval returns: a whole verification run's
// rows and one last row.
TEST(CpuBackend, EvalArgmaxIsTheArgmaxOfEachAskedRow) {
  auto model = synth_model(Arch::kQwen3Moe, "f32");
  ASSERT_NE(model, nullptr);
  CpuBackend backend(*model);
  const uint32_t V = backend.n_vocab();
  const std::vector<int32_t> prompt = ids(6, 4, V), more = ids(4, 5, V);
  std::vector<float> lg, scratch;
  std::vector<int32_t> want, got;
  {
    auto ref = Sequence::create(backend, 16);
    ASSERT_TRUE(ref.ok());
    ASSERT_TRUE(ref->feed(prompt, false, &lg).ok());
    want.push_back(row_argmax({lg.data(), V}));
    ASSERT_TRUE(ref->feed(more, true, &lg).ok());
    for (size_t r = 0; r < more.size(); ++r) want.push_back(row_argmax({lg.data() + r * V, V}));
  }
  auto seq = backend.create_sequence(16);
  ASSERT_TRUE(seq.ok());
  Batch b;
  b.add(*seq, 0, prompt, Logits::kLast);
  std::vector<int32_t> picked;
  ASSERT_TRUE(backend.eval_argmax(b, &picked).ok());
  got.insert(got.end(), picked.begin(), picked.end());
  b.clear();
  b.add(*seq, static_cast<uint32_t>(prompt.size()), more, Logits::kAll);
  ASSERT_TRUE(backend.eval_argmax(b, &picked).ok());
  got.insert(got.end(), picked.begin(), picked.end());
  EXPECT_EQ(backend.position(*seq), prompt.size() + more.size());
  EXPECT_EQ(got, want);
  backend.free_sequence(*seq);
}

TEST(CpuBackend, AForkContinuesAsTheOriginal) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen35Moe}) {
    auto model = synth_model(arch, "f32");
    ASSERT_NE(model, nullptr);
    CpuBackend backend(*model);
    const uint32_t V = backend.n_vocab();
    const std::vector<int32_t> prompt = ids(7, 1, V), more = ids(3, 2, V), other = ids(2, 3, V);
    std::vector<float> expected, got, scratch;
    {
      auto ref = Sequence::create(backend, 16);
      ASSERT_TRUE(ref.ok());
      ASSERT_TRUE(ref->feed(prompt, false, &scratch).ok());
      ASSERT_TRUE(ref->feed(more, true, &expected).ok());
    }
    auto original = Sequence::create(backend, 16);
    ASSERT_TRUE(original.ok());
    ASSERT_TRUE(original->feed(prompt, false, &scratch).ok());
    auto diverging = backend.fork_sequence(original->id());
    auto following = backend.fork_sequence(original->id());
    ASSERT_TRUE(diverging.ok() && following.ok()) << diverging.status().to_string();
    EXPECT_EQ(backend.position(*following), 7u);
    EXPECT_EQ(backend.n_ctx(*following), 16u);
    Batch b;
    b.add(*diverging, 7, other, Logits::kLast);
    ASSERT_TRUE(backend.eval(b, &scratch).ok());
    ASSERT_TRUE(original->feed(more, true, &got).ok());
    EXPECT_EQ(got, expected) << arch_info(arch).name << ": the original after its fork diverged";
    b.clear();
    b.add(*following, 7, more, Logits::kAll);
    ASSERT_TRUE(backend.eval(b, &got).ok());
    EXPECT_EQ(got, expected) << arch_info(arch).name << ": the fork";
    EXPECT_EQ(backend.position(*diverging), 9u);
    backend.free_sequence(*diverging);
    backend.free_sequence(*following);
  }
}

// Truncating and evaluating the same tokens again reproduces their logits; a recurrent
// (Gated DeltaNet) state refuses to go back anywhere but 0.
TEST(CpuBackend, TruncateThenReevaluateReproducesTheLogits) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen35Moe}) {
    auto model = synth_model(arch, "f32");
    ASSERT_NE(model, nullptr);
    CpuBackend backend(*model);
    const uint32_t V = backend.n_vocab();
    const bool recurrent = arch_info(arch).linear_attention;
    const std::vector<int32_t> prompt = ids(8, 4, V);
    auto seq = Sequence::create(backend, 16);
    ASSERT_TRUE(seq.ok());
    std::vector<float> all, again;
    ASSERT_TRUE(seq->feed(prompt, true, &all).ok());
    const Status back = backend.truncate_sequence(seq->id(), 5);
    if (recurrent) {
      EXPECT_FALSE(back.ok());
      EXPECT_NE(back.message().find("recurrent"), std::string::npos) << back.message();
      EXPECT_EQ(seq->position(), 8u);
    } else {
      ASSERT_TRUE(back.ok()) << back.to_string();
      EXPECT_EQ(seq->position(), 5u);
      ASSERT_TRUE(seq->feed({&prompt[5], 3}, true, &again).ok());
      for (uint32_t r = 0; r < 3; ++r) EXPECT_LE(rel(&again[r * V], &all[(5 + r) * V], V), 1e-5) << "row " << 5 + r;
    }
    EXPECT_TRUE(backend.truncate_sequence(seq->id(), 8).ok()) << "its own length";
    ASSERT_TRUE(backend.truncate_sequence(seq->id(), 0).ok());
    EXPECT_EQ(seq->position(), 0u);
    ASSERT_TRUE(seq->feed(prompt, true, &again).ok());
    EXPECT_EQ(again, all) << arch_info(arch).name << ": from 0 again";
  }
}

TEST(CpuBackend, BadInputIsAStatusAndMovesNothing) {
  auto model = synth_model(Arch::kQwen3Moe, "f32");
  ASSERT_NE(model, nullptr);
  CpuBackend backend(*model);
  const auto V = static_cast<int32_t>(backend.n_vocab());
  const SeqId a = *backend.create_sequence(4), b = *backend.create_sequence(8);
  const SeqId f32 = *backend.create_sequence(8, QuantType::F32);
  std::vector<float> out;
  auto expect_error = [&](const Batch& batch, StatusCode code, const char* what) {
    const Status s = backend.eval(batch, &out);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), code) << what << ": " << s.to_string();
    EXPECT_EQ(backend.position(a), 0u) << what;
    EXPECT_EQ(backend.position(b), 0u) << what;
  };
  Batch batch;
  expect_error(batch, StatusCode::kInvalidArgument, "empty batch");
  batch.add(999, 0, 1, true);
  expect_error(batch, StatusCode::kInvalidArgument, "unknown sequence");
  for (int32_t bad : {V, -1}) {
    batch.clear();
    batch.add(a, 0, bad, true);
    expect_error(batch, StatusCode::kInvalidArgument, "token outside the vocabulary");
  }
  batch.clear();
  batch.add(b, 0, 1, false);
  batch.add(a, 1, 1, true);
  expect_error(batch, StatusCode::kInvalidArgument, "a run not at its sequence's length (after a valid run)");
  batch.clear();
  batch.add(a, 0, 1, false);
  batch.add(a, 2, 1, true);
  expect_error(batch, StatusCode::kInvalidArgument, "positions not consecutive");
  batch.clear();
  batch.add(a, 0, 1, false);
  batch.add(b, 0, 1, false);
  batch.add(a, 1, 1, true);
  expect_error(batch, StatusCode::kInvalidArgument, "a sequence in two runs");
  batch.clear();
  batch.add(a, 0, std::vector<int32_t>(5, 1), Logits::kLast);
  expect_error(batch, StatusCode::kOutOfRange, "context full");
  batch.clear();
  batch.add(b, 0, 1, true);
  batch.add(f32, 0, 1, true);
  expect_error(batch, StatusCode::kInvalidArgument, "KV caches of different types");

  EXPECT_FALSE(backend.truncate_sequence(a, 1).ok()) << "past its length";
  EXPECT_FALSE(backend.truncate_sequence(999, 0).ok());
  EXPECT_FALSE(backend.fork_sequence(999).ok());
  EXPECT_FALSE(backend.create_sequence(0).ok());
  // Still serving: the same sequences evaluate, and a freed one is unknown.
  batch.clear();
  batch.add(a, 0, std::vector<int32_t>{1, 2, 3, 4}, Logits::kNone);
  batch.add(b, 0, std::vector<int32_t>{5}, Logits::kLast);
  ASSERT_TRUE(backend.eval(batch, &out).ok());
  EXPECT_EQ(out.size(), static_cast<size_t>(V));
  EXPECT_EQ(backend.position(a), 4u);
  backend.free_sequence(a);
  batch.clear();
  batch.add(a, 4, 1, true);
  EXPECT_FALSE(backend.eval(batch, &out).ok()) << "a freed sequence";
}

}  // namespace
}  // namespace mt
