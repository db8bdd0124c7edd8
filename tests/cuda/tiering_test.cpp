// GPU expert tiering (cuda/tiering.h) against the fully resident GPU run of the same file:
// greedy tokens identical for 256 generated tokens at expert budgets of 10%, 25% and 50%
// of all expert bytes, on the real kjv-moe (qwen3moe, F16) and a synthetic qwen2moe
// (shared expert, skewed router, Q4_K_M), with the prompt through the hybrid step and
// through prefill streaming, half the expert layers pinned and half pageable. The
// counters show both sides worked: experts on the device and on the CPU, copies made.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "cuda/cuda_model.h"
#include "cuda/expert_cache.h"
#include "cuda/tiering.h"
#include "cuda_test_util.h"
#include "tiny_model.h"
#include "experts/stats.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda {
namespace {

// Greedy continuation of `prompt` (fed in pieces of `piece` tokens; 0: whole): n tokens.
std::vector<int32_t> greedy(Evaluator& e, const std::vector<int32_t>& prompt, int n, size_t piece = 0) {
  std::vector<int32_t> out;
  std::vector<float> logits;
  const size_t step = piece == 0 ? prompt.size() : piece;
  for (size_t i = 0; i < prompt.size(); i += step) {
    const size_t m = std::min(step, prompt.size() - i);
    EXPECT_TRUE(e.feed({prompt.data() + i, m}, false, &logits).ok());
  }
  for (int i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    EXPECT_TRUE(e.feed({&next, 1}, false, &logits).ok());
  }
  return out;
}

// The resident reference feeds the prompt as the tiered run does: whole when it streams,
// in pieces of kHybridMaxTokens through the hybrid step, so both run the same kernels
// over the same batches. interleave: the host copy the CPU computes cold experts from.
// The logits after the prompt and after each of `tokens`, fed as greedy() feeds them.
std::vector<std::vector<float>> forced(Evaluator& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens,
                                       size_t piece = 0) {
  std::vector<std::vector<float>> out(1);
  const size_t step = piece == 0 ? prompt.size() : piece;
  for (size_t i = 0; i < prompt.size(); i += step) {
    EXPECT_TRUE(e.feed({prompt.data() + i, std::min(step, prompt.size() - i)}, false, &out.back()).ok());
  }
  for (int32_t t : tokens) {
    out.emplace_back();
    EXPECT_TRUE(e.feed({&t, 1}, false, &out.back()).ok());
  }
  return out;
}

// unified: one pool of largest-expert slots (plan_unified_pool) instead of exact pools.
// exact false (the Gated DeltaNet family): the CPU's cold experts round differently from
// the device's and the recurrent state carries that forward, so instead of identical
// greedy tokens the tiered run, fed the resident run's tokens, must give logits within
// the quantized bound 2e-2 of the resident ones at every step and the same argmax
// wherever the resident top-2 gap is above that bound.
// split: hybrid with half of each layer-step's CPU misses copied to the device and
// computed there (admitted, or staged when the policy refuses: frequency).
void check_model(const std::string& path, const std::vector<int32_t>& prompt, bool interleave,
                 MoeMode mode = MoeMode::kHybrid, bool unified = false, bool exact = true, bool split = false,
                 CachePolicy policy = CachePolicy::kLru) {
  constexpr int kTokens = 256;
  auto resident_host = Model::load(path, {0, false});
  ASSERT_TRUE(resident_host.ok()) << resident_host.status().to_string();
  std::vector<int32_t> ref_whole, ref_pieces;
  std::vector<std::vector<float>> logits_whole, logits_pieces;
  {
    auto resident = CudaModel::load(**resident_host);
    ASSERT_TRUE(resident.ok()) << resident.status().to_string();
    for (size_t piece : {size_t{0}, size_t{kHybridMaxTokens}}) {
      auto seq = (*resident)->new_sequence(static_cast<uint32_t>(prompt.size()) + kTokens + 8);
      ASSERT_TRUE(seq.ok());
      (piece == 0 ? ref_whole : ref_pieces) = greedy(**seq, prompt, kTokens, piece);
      if (!exact) {
        auto again = (*resident)->new_sequence(static_cast<uint32_t>(prompt.size()) + kTokens + 8);
        ASSERT_TRUE(again.ok());
        (piece == 0 ? logits_whole : logits_pieces) = forced(**again, prompt, piece == 0 ? ref_whole : ref_pieces, piece);
      }
    }
  }
  LoadOptions lo{0, interleave};
  lo.interleave_experts_only = true;
  auto host = Model::load(path, lo);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  CudaOptions options;
  options.experts_on_host = true;
  auto tiered = CudaModel::load(**host, options);
  ASSERT_TRUE(tiered.ok()) << tiered.status().to_string();
  for (int percent : {10, 25, 50}) {
    for (uint32_t stream_threshold : {0u, 16u}) {  // the prompt through the hybrid step, then streamed
      SCOPED_TRACE(path + " budget " + std::to_string(percent) + "% stream threshold " + std::to_string(stream_threshold));
      const uint64_t budget = geometry->compact_bytes * static_cast<uint64_t>(percent) / 100;
      CudaTieringOptions to;
      to.pin_budget = geometry->compact_bytes / 2;  // about half the layers pinned, the rest pageable
      to.stream_threshold = stream_threshold;
      SchedulerOptions so;
      so.mode = mode;
      so.max_admissions = mode == MoeMode::kHybrid ? 2 : 0;  // the GPU's default cap (hybrid only)
      so.split_misses = split;
      if (split) so.split_fraction = 0.5;
      CacheOptions co;  // stream mode: the frequency policy refuses first requests, so misses are also staged
      co.policy = policy;
      if (mode == MoeMode::kStream) co.policy = CachePolicy::kFrequency;
      const PoolPlan plan = unified ? plan_unified_pool(*geometry, budget) : plan_pools(*geometry, budget);
      auto tier = make_cuda_tiering(**host, *geometry, plan, co, so, to, std::make_unique<ModelCpuExperts>(**host));
      ASSERT_TRUE(tier.ok()) << tier.status().to_string();
      (*tiered)->set_tiering(tier->get());
      if (exact) {
        auto seq = (*tiered)->new_sequence(static_cast<uint32_t>(prompt.size()) + kTokens + 8);
        ASSERT_TRUE(seq.ok()) << seq.status().to_string();
        const std::vector<int32_t> got = greedy(**seq, prompt, kTokens);
        const std::vector<int32_t>& ref = stream_threshold > 0 ? ref_whole : ref_pieces;
        size_t first_diff = 0;
        while (first_diff < got.size() && got[first_diff] == ref[first_diff]) ++first_diff;
        EXPECT_EQ(first_diff, ref.size()) << "first different token at " << first_diff;
      } else {
        auto seq = (*tiered)->new_sequence(static_cast<uint32_t>(prompt.size()) + kTokens + 8);
        ASSERT_TRUE(seq.ok()) << seq.status().to_string();
        const auto& ref = stream_threshold > 0 ? logits_whole : logits_pieces;
        const auto got = forced(**seq, prompt, stream_threshold > 0 ? ref_whole : ref_pieces, stream_threshold > 0 ? 0 : kHybridMaxTokens);
        ASSERT_EQ(got.size(), ref.size());
        double worst = 0;
        int argmax_same = 0, decisive = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          float scale = 0, diff = 0;
          for (size_t v = 0; v < ref[i].size(); ++v) {
            scale = std::max(scale, std::fabs(ref[i][v]));
            diff = std::max(diff, std::fabs(ref[i][v] - got[i][v]));
          }
          worst = std::max(worst, static_cast<double>(diff / scale));
          std::vector<float> top = ref[i];
          std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
          const bool same = std::max_element(ref[i].begin(), ref[i].end()) - ref[i].begin() ==
                            std::max_element(got[i].begin(), got[i].end()) - got[i].begin();
          argmax_same += same;
          if (top[0] - top[1] >= 2e-2 * scale) {
            ++decisive;
            EXPECT_TRUE(same) << "argmax differs at step " << i << " (resident top-2 gap " << top[0] - top[1] << ")";
          }
        }
        EXPECT_LE(worst, 2e-2);
        std::printf("%s %d%% stream %u: logits max rel %.2e over %zu steps, argmax %d/%zu (%d decisive)\n", path.c_str(),
                    percent, stream_threshold, worst, ref.size(), argmax_same, ref.size(), decisive);
      }
      const StatsTotals totals = stats_totals(*(*tier)->scheduler);
      std::printf("%s %d%% stream %u: hit rate %.3f, device experts %llu, cpu experts %llu, copied %llu B, "
                  "pinned layers %zu, pageable %zu, streamed %llu B\n",
                  path.c_str(), percent, stream_threshold, totals.hit_rate,
                  static_cast<unsigned long long>(totals.sched.device_experts),
                  static_cast<unsigned long long>(totals.sched.cpu_experts),
                  static_cast<unsigned long long>((*tier)->cache->counters().bytes_copied), (*tier)->pins.pinned.size(),
                  (*tier)->pins.pageable.size(), static_cast<unsigned long long>((*tier)->cache->counters().bytes_streamed));
      if (mode == MoeMode::kStream) {  // every expert on the device, refused misses staged
        EXPECT_EQ(totals.sched.cpu_experts, 0u);
        EXPECT_GT((*tier)->cache->counters().staged_experts, 0u);
      } else {
        EXPECT_GT(totals.sched.cpu_experts, 0u);
      }
      if (split && co.policy == CachePolicy::kFrequency) {  // first requests refused: staged
        EXPECT_GT((*tier)->cache->counters().staged_experts, 0u);
      }
      EXPECT_GT(totals.sched.device_experts, 0u);
      EXPECT_GT((*tier)->cache->counters().bytes_copied, 0u);
      EXPECT_FALSE((*tier)->pins.pinned.empty());
      EXPECT_FALSE((*tier)->pins.pageable.empty());
      if (stream_threshold > 0) {
        EXPECT_GT((*tier)->cache->counters().streamed_layers, 0u);
      }
      (*tiered)->set_tiering(nullptr);
    }
  }
}

// kjv-moe: a real trained qwen3moe (vocabulary 4096), the repository's copy (models/,
// also on the GPU machine, which lacks the shared test data), and its prompt.
std::string kjv_path() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/models/kjv-moe-f16.gguf";
}
std::vector<int32_t> kjv_prompt() {
  std::vector<int32_t> p(23);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>((i * 97 + 11) % 4000);
  return p;
}
// The prompt of the tiny synthetic models.
std::vector<int32_t> synth_prompt() {
  std::vector<int32_t> p(40);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>((i * 131 + 7) % 200);
  return p;
}
// A tiny q4_k_m qwen2moe (shared expert) with a skewed router, written to `name`.
std::string skewed_qwen2moe(const std::string& name) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen2Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  c.router_skew = 1.0f;
  const std::string path = mt::test::temp_path(name);
  EXPECT_TRUE(synth::write_model(c, {path, false}).ok());
  return path;
}

TEST(CudaTiering, GreedyTokensEqualTheResidentRunAtEveryBudget) {
  MT_SKIP_WITHOUT_DEVICE();
  check_model(kjv_path(), kjv_prompt(), false);
  check_model(skewed_qwen2moe("tiering-qwen2moe.gguf"), synth_prompt(), true);  // Q4_K / Q6_K experts: the CPU reads interleaved copies
}

// The unified max-size layout (q4_k_m: Q4_K and Q6_K down layers, so the Q4_K layers'
// experts sit in wider slots, strided), and the Gated DeltaNet family tiered.
TEST(CudaTiering, UnifiedSlotsAndTheHybridFamilyEqualTheResidentRun) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen2Moe, Arch::kQwen35Moe}) {
    synth::SynthConfig c = synth::tiny_for(arch);
    c.quant = *synth::parse_quant_mix("q4_k_m");
    c.router_skew = 1.0f;
    const std::string path = mt::test::temp_path(std::string("tiering-unified-") + std::string(arch_info(arch).name) + ".gguf");
    ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
    check_model(path, synth_prompt(), true, MoeMode::kHybrid, /*unified=*/arch == Arch::kQwen2Moe, /*exact=*/arch == Arch::kQwen2Moe);
  }
}

// The seeds' other families tiered as they are (issue 9): gpt-oss (MXFP4 experts with
// their biases and the clamped SwiGLU on both sides of the split), laguna (sigmoid routing
// with the selection bias, a shared expert, windows) and deepseek2 (latent attention, group-
// limited routing, a leading dense block): teacher-forced as the hybrid family above
// (the CPU's cold experts round differently and the windows / latent cache carry it on).
TEST(CudaTiering, TheSeedFamiliesTierUnchanged) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kGptOss, Arch::kLaguna, Arch::kDeepseek2}) {
    synth::SynthConfig c = synth::tiny_for(arch);
    c.quant = *synth::parse_quant_mix(arch == Arch::kGptOss ? "mxfp4" : "q4_k_m");
    const std::string path = mt::test::temp_path(std::string("tiering-") + std::string(arch_info(arch).name) + ".gguf");
    ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
    check_model(path, synth_prompt(), true, MoeMode::kHybrid, /*unified=*/false, /*exact=*/false);
  }
}

// Hybrid with the split of misses (the GPU default): the device's share copied in on the
// critical path, admitted (LRU) or staged (frequency refuses first requests).
TEST(CudaTiering, SplitMissesGreedyTokensEqualTheResidentRun) {
  MT_SKIP_WITHOUT_DEVICE();
  check_model(kjv_path(), kjv_prompt(), false, MoeMode::kHybrid, false, true, /*split=*/true);
  check_model(skewed_qwen2moe("tiering-split-qwen2moe.gguf"), synth_prompt(), true, MoeMode::kHybrid, false, true,
              /*split=*/true, CachePolicy::kFrequency);
}

TEST(CudaTiering, StreamModeGreedyTokensEqualTheResidentRun) {
  MT_SKIP_WITHOUT_DEVICE();
  check_model(kjv_path(), kjv_prompt(), false, MoeMode::kStream);
}

// The pinning tests' 12-token prompt (ids below the tiny vocabulary).
std::vector<int32_t> pin_prompt(int mul, int add) {
  std::vector<int32_t> prompt(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * mul + add) % 200);
  return prompt;
}

// 32 greedy tokens of a fresh sequence of m (empty when it cannot make one).
std::vector<int32_t> greedy_32(CudaModel& m, const std::vector<int32_t>& prompt, size_t piece = 0) {
  auto seq = m.new_sequence(64);
  EXPECT_TRUE(seq.ok());
  return seq.ok() ? greedy(**seq, prompt, 32, piece) : std::vector<int32_t>{};
}

// The resident run's 32 greedy tokens, the prompt whole as the hybrid step takes it.
std::vector<int32_t> resident_greedy_32(const Model& host, const std::vector<int32_t>& prompt) {
  auto resident = CudaModel::load(host);
  EXPECT_TRUE(resident.ok());
  return resident.ok() ? greedy_32(**resident, prompt, kHybridMaxTokens) : std::vector<int32_t>{};
}

// The model with its routed experts left in host memory, for a tiering.
StatusOr<std::unique_ptr<CudaModel>> load_experts_on_host(const Model& host) {
  CudaOptions options;
  options.experts_on_host = true;
  return CudaModel::load(host, options);
}

TEST(CudaTiering, AForcedPinRefusalLeavesTheLayerPageableAndTheOutputCorrect) {
  MT_SKIP_WITHOUT_DEVICE();
  auto host = test::load_tiny(Arch::kQwen3Moe, "q4_k_m", "tiering-pinfail");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  const std::vector<int32_t> prompt = pin_prompt(17, 3);
  const std::vector<int32_t> ref = resident_greedy_32(**host, prompt);
  ASSERT_EQ(ref.size(), 32u);
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  auto tiered = load_experts_on_host(**host);
  ASSERT_TRUE(tiered.ok());
  CudaTieringOptions to;  // pin everything, but the allocator refuses past one layer's bank (+ staging)
  to.stream_threshold = 0;  // staging buffers of one expert each; the prompt through the hybrid step
  uint64_t largest = 0;
  for (const LayerExpertGeometry& l : geometry->layers) largest = std::max(largest, l.bytes_per_expert());
  to.pin_limit = geometry->layers[0].bytes_per_expert() * geometry->n_expert + 8 * largest;
  auto tier = make_cuda_tiering(**host, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{},
                                SchedulerOptions{}, to, std::make_unique<ModelCpuExperts>(**host));
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  EXPECT_FALSE((*tier)->store->pin_failures().empty());
  EXPECT_NE((*tier)->store->pin_failures()[0].reason.find("pin limit"), std::string::npos);
  (*tiered)->set_tiering(tier->get());
  EXPECT_EQ(greedy_32(**tiered, prompt), ref);
  EXPECT_GT((*tier)->cache->counters().bytes_through_ring, 0u);
  (*tiered)->set_tiering(nullptr);
}

// --pin-background: the tiering returns before its layers are pinned; the first tokens copy
// from pageable banks (the staging ring) while layers switch to their pinned copies one by
// one; greedy tokens equal the resident run's during and after the pinning, and every
// layer ends pinned.
TEST(CudaTiering, BackgroundPinningGivesTheResidentTokensDuringAndAfter) {
  MT_SKIP_WITHOUT_DEVICE();
  auto host = test::load_tiny(Arch::kQwen3Moe, "q4_k_m", "tiering-pinbg");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  const std::vector<int32_t> prompt = pin_prompt(13, 5);
  const std::vector<int32_t> ref = resident_greedy_32(**host, prompt);
  ASSERT_EQ(ref.size(), 32u);
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  auto tiered = load_experts_on_host(**host);
  ASSERT_TRUE(tiered.ok());
  CudaTieringOptions to;
  to.stream_threshold = 0;
  to.pin_background = true;
  auto tier = make_cuda_tiering(**host, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{},
                                SchedulerOptions{}, to, std::make_unique<ModelCpuExperts>(**host));
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  (*tiered)->set_tiering(tier->get());
  EXPECT_EQ(greedy_32(**tiered, prompt), ref);  // while the layers are pinned
  (*tier)->store->wait_pinning();
  EXPECT_FALSE((*tier)->store->pinning());
  EXPECT_TRUE((*tier)->store->pin_failures().empty());
  for (const LayerExpertGeometry& l : geometry->layers) EXPECT_TRUE((*tier)->store->pinned(l.layer)) << l.layer;
  EXPECT_EQ(greedy_32(**tiered, prompt), ref);
  (*tiered)->set_tiering(nullptr);
}

TEST(CudaTiering, ASequenceOfAnExpertsOnHostModelNeedsATiering) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  const std::string path = mt::test::temp_path("tiering-none.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto host = Model::load(path, {0, false});
  ASSERT_TRUE(host.ok());
  CudaOptions options;
  options.experts_on_host = true;
  auto tiered = CudaModel::load(**host, options);
  ASSERT_TRUE(tiered.ok());
  auto seq = (*tiered)->new_sequence(16);
  ASSERT_FALSE(seq.ok());
  EXPECT_NE(seq.status().message().find("set_tiering"), std::string::npos);
}

}  // namespace
}  // namespace mt::cuda
