// Speculative decoding (runtime/speculative.h) on the CPU backend: with every drafter
// (prompt lookup, a draft model, the labelled scripted mode) and draft lengths 1-8, greedy
// output equals plain greedy decoding for 64 tokens on the demo model and on a synthetic
// model of every architecture (the Gated DeltaNet hybrids through their logged
// verification runs; tiered over the simulated device too), except at a near tie of the
// plain logits; the sequence holds exactly the accepted tokens after every step; sampled
// text equals plain sampling's seed for seed; a verification row draws from the target's
// distribution (chi-square over 10,000 draws); the drafters' proposals; the throttle; a
// recurrent state cut back into its last run equals one that never saw the cut tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "experts/geometry.h"
#include "experts/pools.h"
#include "model/cpu_backend.h"
#include "model/offload.h"
#include "model/model.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"
#include "backend_schedule.h"
#include "spec_check.h"
#include "synth/synth.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt::spec_test {
namespace {

using namespace mt::test::spec;

constexpr int kGenerate = 64;

std::string write_tiny(Arch arch, const char* quant) {
  synth::SynthConfig c = synth::tiny_for(arch);
  c.quant = *synth::parse_quant_mix(quant);
  const std::string path = test::temp_path(std::string(arch_info(arch).name) + "-" + quant + "-spec.gguf");
  EXPECT_TRUE(synth::write_model(c, {path, false}).ok());
  return path;
}

// Drafters and lengths against plain decoding on one model; returns the near-tie count.
// full: lengths 1-8 with the scripted drafter at p 0.5 and 0.9 and lookup, the model as its
// own draft at 1, 4 and 8; else (a lighter sweep for the second type of an architecture)
// the scripted drafter at p 0.7 for lengths 1-8, lookup at 2 and 8, the draft model at 4
// (not for a Gated DeltaNet model: as a draft it cannot go back over its guesses).
int check_drafters(const Model& model, const std::vector<int32_t>& prompt, double tie, const std::string& name, bool full) {
  CpuBackend backend(model);
  CpuBackend draft_backend(model);  // the model as its own draft: every guess right
  const Plain plain = plain_greedy(backend, prompt, kGenerate);
  const std::vector<int32_t> reference = script_of(prompt, plain.tokens);
  bool recurrent = false;  // a Gated DeltaNet draft cannot go back over its guesses (several runs)
  for (uint32_t l = 0; l < model.hparams().n_layer; ++l) recurrent |= model.hparams().is_recurrent(l);
  int ties = 0;
  for (int length = 1; length <= 8; ++length) {
    SpecConfig config;
    config.draft_max = length;
    config.adaptive = false;
    for (double p : full ? std::vector<double>{0.5, 0.9} : std::vector<double>{0.7}) {
      ScriptedDrafter scripted(reference, p, backend.n_vocab(), 7 + static_cast<uint64_t>(length));
      ties += expect_greedy_parity(plain, spec_decode(backend, scripted, config, prompt, kGenerate, greedy_params()), tie,
                                   name + " scripted p " + std::to_string(p) + " length " + std::to_string(length));
    }
    if (full || length == 2 || length == 8) {
      LookupDrafter lookup(3, 1);
      ties += expect_greedy_parity(plain, spec_decode(backend, lookup, config, prompt, kGenerate, greedy_params()), tie,
                                   name + " lookup length " + std::to_string(length));
    }
    if (!recurrent && (full ? (length == 1 || length == 4 || length == 8) : length == 4)) {
      auto drafter = ModelDrafter::create(draft_backend, 512, "self");
      EXPECT_TRUE(drafter.ok());
      SpecStats stats;
      ties += expect_greedy_parity(plain, spec_decode(backend, **drafter, config, prompt, kGenerate, greedy_params(), &stats),
                                   tie, name + " draft model length " + std::to_string(length));
      EXPECT_GT(stats.acceptance(), 0.8) << name << ": the model drafting for itself";
    }
  }
  // Adaptive length: the same tokens.
  LookupDrafter lookup(2, 1);
  ties += expect_greedy_parity(plain, spec_decode(backend, lookup, SpecConfig{}, prompt, kGenerate, greedy_params()), tie,
                               name + " lookup adaptive");
  return ties;
}

TEST(Speculative, GreedyEqualsPlainDecodingOnTheDemoModel) {
  auto model = Model::load(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"), {2});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  ASSERT_TRUE(tokenizer.ok());
  const std::vector<int32_t> prompt = tokenizer->encode(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
      "the light from the darkness. And God said",
      true, false);
  EXPECT_EQ(check_drafters(**model, prompt, 2e-3, "kjv-moe f16", true), 0);
}

TEST(Speculative, GreedyEqualsPlainDecodingOnEveryArchitecture) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kLlama, Arch::kOlmoe, Arch::kGlm4Moe, Arch::kDeepseek2,
                    Arch::kGptOss, Arch::kLaguna, Arch::kQwen3Next, Arch::kQwen35Moe}) {
    // Every architecture in F32 (the full sweep), two of them also in q4_k_m (lighter).
    const bool quantized_too = arch == Arch::kQwen3Moe || arch == Arch::kDeepseek2;
    for (const char* quant : {"f32", "q4_k_m"}) {
      if (std::string(quant) == "q4_k_m" && !quantized_too) continue;
      const std::string name = std::string(arch_info(arch).name) + " " + quant;
      SCOPED_TRACE(name);
      auto model = Model::load(write_tiny(arch, quant), {1});
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      const std::vector<int32_t> prompt = test::ids(12, 5, (*model)->hparams().n_vocab);
      const double tie = std::string(quant) == "f32" ? 2e-4 : 4e-2;
      const int ties = check_drafters(**model, prompt, tie, name, std::string(quant) == "f32");
      if (std::string(quant) == "f32") {
        EXPECT_EQ(ties, 0) << name;
      }
    }
  }
}

// Tiered over the simulated device (a quarter of the expert bytes cached): the verification
// batches go through the cache like any other step, and the text is plain decoding's.
TEST(Speculative, GreedyEqualsPlainDecodingTiered) {
  auto model = Model::load(write_tiny(Arch::kQwen3Moe, "q4_k_m"), {1});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto geometry = read_expert_geometry((*model)->file());
  ASSERT_TRUE(geometry.ok()) << geometry.status().to_string();
  auto tiering = make_offload(**model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{},
                              SchedulerOptions{});
  ASSERT_TRUE(tiering.ok()) << tiering.status().to_string();
  CpuBackend backend(**model, &(*tiering)->offload);
  const std::vector<int32_t> prompt = test::ids(12, 5, backend.n_vocab());
  const Plain plain = plain_greedy(backend, prompt, kGenerate);
  const std::vector<int32_t> reference = script_of(prompt, plain.tokens);
  for (int length : {1, 3, 8}) {
    SpecConfig config;
    config.draft_max = length;
    config.adaptive = false;
    ScriptedDrafter scripted(reference, 0.7, backend.n_vocab(), 3);
    expect_greedy_parity(plain, spec_decode(backend, scripted, config, prompt, kGenerate, greedy_params()), 4e-2,
                         "tiered scripted length " + std::to_string(length));
  }
  LookupDrafter lookup(3, 1);
  expect_greedy_parity(plain, spec_decode(backend, lookup, SpecConfig{}, prompt, kGenerate, greedy_params()), 4e-2,
                       "tiered lookup");
  uint64_t cpu_experts = 0, device_experts = 0;  // both sides of the tiering did work
  for (uint32_t l = 0; l < (*model)->hparams().n_layer; ++l) {
    cpu_experts += (*tiering)->offload.scheduler->counters(l).cpu_experts;
    device_experts += (*tiering)->offload.scheduler->counters(l).device_experts;
  }
  EXPECT_GT(cpu_experts, 0u);
  EXPECT_GT(device_experts, 0u);
}

// The scripted drafter at p = 1 proposes the plain continuation: every guess accepted, and
// each step yields its draft length + 1 tokens.
TEST(Speculative, ScriptedAtOneAcceptsEveryGuess) {
  auto model = Model::load(write_tiny(Arch::kQwen3Moe, "f32"), {2});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  const std::vector<int32_t> prompt = test::ids(10, 3, backend.n_vocab());
  const Plain plain = plain_greedy(backend, prompt, 40);
  const std::vector<int32_t> reference = script_of(prompt, plain.tokens);
  ScriptedDrafter scripted(reference, 1.0, backend.n_vocab(), 3);
  SpecConfig config;
  config.draft_max = 4;
  config.adaptive = false;
  SpecStats stats;
  EXPECT_EQ(spec_decode(backend, scripted, config, prompt, 40, greedy_params(), &stats), plain.tokens);
  EXPECT_EQ(stats.accepted, stats.drafted);
  EXPECT_EQ(stats.steps, 8u);  // 1 token from the prompt's logits, then 39 = 7 x 5 + 4 (the last step's cap)
  EXPECT_EQ(stats.emitted, 39u);
}

// Sampling with a drafter gives plain sampling's text seed for seed (each row's token is
// the plain draw): for 12 seeds at temperature 1.5, with prompt lookup and with the
// scripted drafter proposing that seed's own sampled continuation (p 0.7); another seed
// gives other text.
TEST(Speculative, SampledTextEqualsPlainSamplingSeedForSeed) {
  auto model = Model::load(write_tiny(Arch::kQwen3Moe, "f32"), {1});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  const std::vector<int32_t> prompt = test::ids(10, 3, backend.n_vocab());
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_k = 0;
  params.top_p = 1;
  params.min_p = 0;
  std::vector<std::vector<int32_t>> texts;
  uint64_t kept = 0;
  for (uint64_t seed = 11; seed < 23; ++seed) {
    params.seed = seed;
    LookupDrafter lookup(2, 1);
    auto seq = Sequence::create(backend, 512);
    ASSERT_TRUE(seq.ok());
    std::vector<float> logits;
    ASSERT_TRUE(seq->feed(prompt, false, &logits).ok());
    Sampler plain_sampler(params, backend.n_vocab());
    for (int32_t t : prompt) plain_sampler.accept(t);
    std::vector<int32_t> plain;
    for (int i = 0; i < 48; ++i) {
      plain.push_back(plain_sampler.sample(logits));
      plain_sampler.accept(plain.back());
      ASSERT_TRUE(seq->feed({&plain.back(), 1}, false, &logits).ok());
    }
    ScriptedDrafter scripted(script_of(prompt, plain), 0.7, backend.n_vocab(), seed);
    SpecConfig fixed;
    fixed.draft_max = 4;
    fixed.adaptive = false;
    SpecStats stats;
    EXPECT_EQ(spec_decode(backend, scripted, fixed, prompt, 48, params, &stats), plain) << "seed " << seed;
    kept += stats.accepted;
    EXPECT_EQ(spec_decode(backend, lookup, fixed, prompt, 48, params), plain) << "seed " << seed << " lookup";
    texts.push_back(plain);
  }
  EXPECT_GT(kept, 100u);  // the scripted guesses (right 70% of the time) were kept
  EXPECT_NE(texts[0], texts[1]);
}

// Upper critical value of chi-square with df degrees of freedom at alpha = 0.001
// (Wilson-Hilferty, z = 3.09).
double chi2_critical(int df) {
  const double k = df, z = 3.09;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

// Chi-square of observed counts against expected probabilities, bins with an expected
// count under 5 pooled.
void expect_distribution(const std::map<int32_t, int>& observed, const std::vector<double>& p, int draws,
                         const std::string& what) {
  double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const double e = p[t] * draws;
    const auto it = observed.find(static_cast<int32_t>(t));
    const double o = it == observed.end() ? 0 : it->second;
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++bins;
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / std::max(pooled_expected, 1.0);
    ++bins;
  }
  ASSERT_GE(bins, 3) << what;
  EXPECT_LT(chi2, chi2_critical(bins - 1)) << what << ": chi-square " << chi2 << " over " << bins << " bins";
}

// A verification row's token is Sampler::sample's draw, so its distribution is the
// target's: 10,000 draws on the demo model's next-token logits at temperature 1 without
// filters against the softmax itself (chi-square), and a guess is kept exactly when it
// equals the draw: as often as the target's probability of it (within 4 sigma).
TEST(Speculative, VerificationDrawsTheTargetsDistribution) {
  auto model = Model::load(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"), {2});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  ASSERT_TRUE(tokenizer.ok());
  auto seq = Sequence::create(backend, 64);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  ASSERT_TRUE(seq->feed(tokenizer->encode("In the beginning God created the", true, false), false, &logits).ok());
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  constexpr int kDraws = 10000;
  SamplingParams raw;
  raw.temperature = 1;
  raw.top_k = 0;
  raw.top_p = 1;
  raw.min_p = 0;
  raw.seed = 5;
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(static_cast<double>(logits[i]) - logits[order[0]]);
  for (double& v : p) v /= total;
  Sampler sampler(raw, backend.n_vocab());
  std::map<int32_t, int> counts;
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.sample(logits)];
  expect_distribution(counts, p, kDraws, "raw softmax");
  for (int32_t guess : {order[0], order[3]}) {
    const double kept = counts[guess], want = p[static_cast<size_t>(guess)] * kDraws;
    EXPECT_NEAR(kept, want, 4 * std::sqrt(want * (1 - p[static_cast<size_t>(guess)])) + 1) << "guess " << guess;
  }
}

TEST(Speculative, LookupProposesWhatFollowedTheLastOccurrence) {
  LookupDrafter lookup(3, 1);
  std::vector<int32_t> draft;
  // "1 2 3 4 5 ... 1 2 3": the longest n-gram (3) matches at the start; 4 5 6 follow.
  const std::vector<int32_t> h = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3};
  ASSERT_TRUE(lookup.propose(h, 3, &draft).ok());
  EXPECT_EQ(draft, (std::vector<int32_t>{4, 5, 6}));
  ASSERT_TRUE(lookup.propose(h, 8, &draft).ok());  // up to the history's end
  EXPECT_EQ(draft, (std::vector<int32_t>{4, 5, 6, 9, 1, 2, 3}));
  // The most recent occurrence wins: "7 ... 7 8 ... 7 5 ... 7" proposes 5.
  ASSERT_TRUE(lookup.propose(std::vector<int32_t>{7, 8, 0, 7, 5, 0, 0, 7}, 1, &draft).ok());
  EXPECT_EQ(draft, (std::vector<int32_t>{5}));
  // No earlier occurrence of the last token: nothing.
  ASSERT_TRUE(lookup.propose(std::vector<int32_t>{1, 2, 3}, 4, &draft).ok());
  EXPECT_TRUE(draft.empty());
  ASSERT_TRUE(lookup.propose(std::vector<int32_t>{1}, 4, &draft).ok());
  EXPECT_TRUE(draft.empty());
}

TEST(Speculative, ScriptedProposesTheReferenceAtItsRate) {
  std::vector<int32_t> reference(20000);
  for (size_t i = 0; i < reference.size(); ++i) reference[i] = static_cast<int32_t>(i % 97);
  ScriptedDrafter scripted(reference, 0.7, 100, 1);
  std::vector<int32_t> draft;
  int right = 0, total = 0;
  for (size_t at = 1; at + 8 < reference.size(); at += 8) {
    ASSERT_TRUE(scripted.propose(std::span<const int32_t>(reference.data(), at), 8, &draft).ok());
    ASSERT_EQ(draft.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      right += draft[i] == reference[at + i];
      ++total;
    }
  }
  EXPECT_NEAR(static_cast<double>(right) / total, 0.7, 0.02);
  // A history that left the script gets no proposal; so does the script's end.
  std::vector<int32_t> off = {0, 1, 5};
  ASSERT_TRUE(scripted.propose(off, 4, &draft).ok());
  EXPECT_TRUE(draft.empty());
  ASSERT_TRUE(scripted.propose(reference, 4, &draft).ok());
  EXPECT_TRUE(draft.empty());
}

// restart() replays the same guesses. Without the hold the output is the target's: a
// script that differs from plain decoding at one token is left there (and nothing more is
// proposed); with it the output is the script, each pick it overrode counted (the altered
// token, then wherever the original continuation parts from the target's after it), and a
// script equal to plain decoding overrides nothing.
TEST(Speculative, ScriptedHoldKeepsTheScriptAndCountsWhatItOverrode) {
  std::vector<int32_t> reference(64);
  for (size_t i = 0; i < reference.size(); ++i) reference[i] = static_cast<int32_t>(i % 13);
  ScriptedDrafter replayed(reference, 0.5, 100, 9);
  std::vector<int32_t> first, again;
  ASSERT_TRUE(replayed.propose(std::span<const int32_t>(reference.data(), 10), 8, &first).ok());
  replayed.restart();
  ASSERT_TRUE(replayed.propose(std::span<const int32_t>(reference.data(), 10), 8, &again).ok());
  EXPECT_EQ(again, first);
  int32_t token = -1;
  EXPECT_FALSE(replayed.scripted_token(12, &token));  // no hold

  auto model = Model::load(write_tiny(Arch::kQwen3Moe, "f32"), {2});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  const std::vector<int32_t> prompt = test::ids(10, 3, backend.n_vocab());
  const Plain plain = plain_greedy(backend, prompt, 40);
  std::vector<int32_t> script = script_of(prompt, plain.tokens);
  const size_t altered = prompt.size() + 12;
  script[altered] = static_cast<int32_t>((static_cast<uint32_t>(script[altered]) + 1) % backend.n_vocab());
  const std::vector<int32_t> script_tokens(script.begin() + static_cast<ptrdiff_t>(prompt.size()), script.end());
  SpecConfig config;
  config.draft_max = 3;
  config.adaptive = false;

  ScriptedDrafter free_running(script, 0.7, backend.n_vocab(), 5);
  SpecStats stats;
  EXPECT_EQ(spec_decode(backend, free_running, config, prompt, 40, greedy_params(), &stats), plain.tokens);
  EXPECT_EQ(stats.held, 0u);

  ScriptedDrafter held(script, 0.7, backend.n_vocab(), 5, true);
  ASSERT_TRUE(held.scripted_token(altered, &token));
  EXPECT_EQ(token, script[altered]);
  EXPECT_FALSE(held.scripted_token(script.size(), &token));  // past the script: the target's
  stats = {};
  EXPECT_EQ(spec_decode(backend, held, config, prompt, 40, greedy_params(), &stats), script_tokens);
  EXPECT_GE(stats.held, 1u);
  EXPECT_GT(stats.accepted, 0u);  // the guesses after the altered token are still the script's and kept

  ScriptedDrafter held_plain(script_of(prompt, plain.tokens), 0.7, backend.n_vocab(), 5, true);
  stats = {};
  EXPECT_EQ(spec_decode(backend, held_plain, config, prompt, 40, greedy_params(), &stats), plain.tokens);
  EXPECT_EQ(stats.held, 0u);
}

// Gated DeltaNet hybrids: a verification run is logged (Backend::keep_run_rollback) and cut
// short through the recurrent states; without the log, truncating into a run is a Status
// naming the recurrent state; a draft model's guesses are the target's and pass through.
TEST(Speculative, RecurrentStatesGoBackIntoTheVerificationRun) {
  auto model = Model::load(write_tiny(Arch::kQwen35Moe, "f32"), {1});
  ASSERT_TRUE(model.ok());
  CpuBackend backend(**model);
  auto seq = Sequence::create(backend, 64);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  ASSERT_TRUE(seq->feed(test::ids(8, 3, backend.n_vocab()), false, &logits).ok());
  ASSERT_TRUE(seq->feed(test::ids(5, 4, backend.n_vocab()), false, &logits).ok());
  Status s = backend.truncate_sequence(seq->id(), 10);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recurrent"), std::string::npos) << s.to_string();
  ASSERT_TRUE(backend.keep_run_rollback(seq->id(), 8).ok());
  ASSERT_TRUE(seq->feed(test::ids(5, 5, backend.n_vocab()), false, &logits).ok());  // positions 13-17, logged
  ASSERT_TRUE(backend.truncate_sequence(seq->id(), 15).ok());
  EXPECT_EQ(backend.position(seq->id()), 15u);
  s = backend.truncate_sequence(seq->id(), 12);  // before the logged run
  EXPECT_FALSE(s.ok());
  ASSERT_TRUE(seq->feed(test::ids(20, 6, backend.n_vocab()), false, &logits).ok());  // 20 > 8: not logged
  EXPECT_FALSE(backend.truncate_sequence(seq->id(), 30).ok());
}

// The states after a cut-short run are those of evaluating only its kept tokens: the next
// token's logits agree with a sequence that never saw the rejected ones.
TEST(Speculative, RecurrentRollbackEqualsNeverHavingSeenTheTokens) {
  for (Arch arch : {Arch::kQwen35Moe, Arch::kQwen3Next}) {
    SCOPED_TRACE(arch_info(arch).name);
    auto model = Model::load(write_tiny(arch, "f32"), {1});
    ASSERT_TRUE(model.ok());
    CpuBackend backend(**model);
    const uint32_t V = backend.n_vocab();
    const std::vector<int32_t> prompt = test::ids(9, 3, V), run = test::ids(6, 7, V);
    for (uint32_t keep : {0u, 1u, 3u, 5u}) {
      auto a = Sequence::create(backend, 64), b = Sequence::create(backend, 64);
      ASSERT_TRUE(a.ok() && b.ok());
      std::vector<float> la, lb;
      ASSERT_TRUE(a->feed(prompt, false, &la).ok());
      ASSERT_TRUE(backend.keep_run_rollback(a->id(), 8).ok());
      ASSERT_TRUE(a->feed(run, false, &la).ok());
      ASSERT_TRUE(backend.truncate_sequence(a->id(), static_cast<uint32_t>(prompt.size()) + keep).ok());
      std::vector<int32_t> kept = prompt;
      kept.insert(kept.end(), run.begin(), run.begin() + keep);
      ASSERT_TRUE(b->feed(kept, false, &lb).ok());
      const int32_t next = 17;
      ASSERT_TRUE(a->feed({&next, 1}, false, &la).ok());
      ASSERT_TRUE(b->feed({&next, 1}, false, &lb).ok());
      double worst = 0, scale = 1e-30;
      for (size_t i = 0; i < la.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(la[i] - lb[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(lb[i])));
      }
      EXPECT_LT(worst / scale, 1e-4) << "keep " << keep;
    }
  }
}

}  // namespace
}  // namespace mt::spec_test
