// NextN (MTP) drafting on the CPU (model/nextn.cpp, CpuBackend::propose_nextn, runtime's
// NextnDrafter): greedy speculative decoding with the model's own NextN block gives plain
// decoding's tokens at every draft length on each architecture whose files carry one; a
// proposal made incrementally (entries fed a few at a time, guesses chained and then
// overwritten, sequences truncated) equals one made from scratch over the same history;
// the errors are Statuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/cpu_backend.h"
#include "model/model.h"
#include "runtime/speculative.h"
#include "backend_schedule.h"
#include "spec_check.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::nextn_test {
namespace {

using namespace mt::test::spec;

std::string write_with_nextn(Arch arch, const char* quant) {
  synth::SynthConfig c = synth::tiny_for(arch);
  c.quant = *synth::parse_quant_mix(quant);
  c.n_nextn = 1;
  const std::string path = test::temp_path(std::string(arch_info(arch).name) + "-" + quant + "-nextn.gguf");
  const auto s = synth::write_model(c, {path, false});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return path;
}

TEST(Nextn, GreedyEqualsPlainDecodingAtEveryDraftLength) {
  for (Arch arch : {Arch::kGlm4Moe, Arch::kDeepseek2, Arch::kQwen35Moe, Arch::kQwen3Next}) {
    for (const char* quant : {"f32", "q8_0"}) {
      const std::string name = std::string(arch_info(arch).name) + " " + quant;
      SCOPED_TRACE(name);
      auto model = Model::load(write_with_nextn(arch, quant), {1});
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      ASSERT_TRUE((*model)->has_nextn()) << (*model)->nextn_status().to_string();
      CpuBackend backend(**model);
      const std::vector<int32_t> prompt = test::ids(10, 3, (*model)->hparams().n_vocab);
      const Plain plain = plain_greedy(backend, prompt, 40);
      const double tie = std::string(quant) == "f32" ? 2e-4 : 4e-2;
      uint64_t drafted = 0;
      for (int length = 1; length <= 8; ++length) {
        NextnDrafter drafter;
        SpecConfig config;
        config.draft_max = length;
        config.adaptive = false;  // every step drafts `length` guesses
        SpecStats stats;
        const auto tokens = spec_decode(backend, drafter, config, prompt, 40, greedy_params(), &stats);
        const bool tied = expect_greedy_parity(plain, tokens, tie, name + " length " + std::to_string(length));
        if (std::string(quant) == "f32") {
          EXPECT_FALSE(tied);
        }
        drafted += stats.drafted;
      }
      EXPECT_GT(drafted, 100u);  // the drafter proposed (random weights: few are right)
    }
  }
}

// The drafts after a history fed piecewise (as speculative decoding feeds it: entries a
// step at a time, chains overwritten, a truncation) equal those of a fresh sequence that
// is fed the whole history at once and proposes once.
TEST(Nextn, IncrementalProposalsEqualOnesFromScratch) {
  auto model = Model::load(write_with_nextn(Arch::kGlm4Moe, "f32"), {1});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const uint32_t V = (*model)->hparams().n_vocab;
  const std::vector<int32_t> tokens = test::ids(40, 7, V);
  CpuBackend backend(**model);
  auto seq = Sequence::create(backend, 128);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(backend.enable_nextn(seq->id()).ok());
  std::vector<float> logits;
  ASSERT_TRUE(seq->feed({tokens.data(), 6}, false, &logits).ok());
  std::vector<int32_t> draft, fresh;
  uint32_t n = 6;
  for (uint32_t step : {1u, 3u, 1u, 5u, 2u}) {
    // Propose over the history so far (its last token pending), then feed `step` tokens
    // plus a wrong one and truncate it away, as a rejected guess is.
    ASSERT_TRUE(backend.propose_nextn(seq->id(), {tokens.data(), n + 1}, 4, &draft).ok());
    ASSERT_EQ(draft.size(), 4u);
    std::vector<int32_t> run(tokens.begin() + n, tokens.begin() + n + step);
    run.push_back((tokens[n + step] + 1) % static_cast<int32_t>(V));
    ASSERT_TRUE(seq->feed(run, true, &logits).ok());
    n += step;
    ASSERT_TRUE(backend.truncate_sequence(seq->id(), n).ok());
  }
  ASSERT_TRUE(backend.propose_nextn(seq->id(), {tokens.data(), n + 1}, 6, &draft).ok());
  auto again = Sequence::create(backend, 128);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(backend.enable_nextn(again->id()).ok());
  ASSERT_TRUE(again->feed({tokens.data(), n}, false, &logits).ok());
  ASSERT_TRUE(backend.propose_nextn(again->id(), {tokens.data(), n + 1}, 6, &fresh).ok());
  EXPECT_EQ(draft, fresh);
  // A fork carries the NextN state along.
  auto fork = backend.fork_sequence(again->id());
  ASSERT_TRUE(fork.ok());
  std::vector<int32_t> forked;
  ASSERT_TRUE(backend.propose_nextn(*fork, {tokens.data(), n + 1}, 6, &forked).ok());
  EXPECT_EQ(forked, fresh);
  backend.free_sequence(*fork);
}

TEST(Nextn, ErrorsAreStatuses) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("f32");
  const std::string plain_path = test::temp_path("qwen3moe-no-nextn.gguf");
  ASSERT_TRUE(synth::write_model(c, {plain_path, false}).ok());
  auto plain = Model::load(plain_path, {1});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->has_nextn());
  EXPECT_NE((*plain)->nextn_status().message().find("no NextN"), std::string::npos);
  CpuBackend none(**plain);
  auto s0 = none.create_sequence(32);
  ASSERT_TRUE(s0.ok());
  EXPECT_FALSE(none.enable_nextn(*s0).ok());

  auto model = Model::load(write_with_nextn(Arch::kGlm4Moe, "f32"), {1});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  auto seq = Sequence::create(backend, 32);
  ASSERT_TRUE(seq.ok());
  std::vector<int32_t> draft;
  const std::vector<int32_t> tokens = test::ids(8, 1, (*model)->hparams().n_vocab);
  EXPECT_FALSE(backend.propose_nextn(seq->id(), {tokens.data(), 1}, 2, &draft).ok());  // not enabled
  std::vector<float> logits;
  ASSERT_TRUE(seq->feed({tokens.data(), 3}, false, &logits).ok());
  const Status late = backend.enable_nextn(seq->id());
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("before a sequence's first token"), std::string::npos) << late.to_string();
  auto fresh = Sequence::create(backend, 32);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(backend.enable_nextn(fresh->id()).ok());
  ASSERT_TRUE(fresh->feed({tokens.data(), 3}, false, &logits).ok());
  EXPECT_FALSE(backend.propose_nextn(fresh->id(), {tokens.data(), 3}, 2, &draft).ok());  // history must be 3 + 1
  EXPECT_TRUE(backend.propose_nextn(fresh->id(), {tokens.data(), 4}, 2, &draft).ok());
  EXPECT_EQ(draft.size(), 2u);
  NextnDrafter unattached;
  EXPECT_FALSE(unattached.propose({tokens.data(), 4}, 2, &draft).ok());
}

}  // namespace
}  // namespace mt::nextn_test
