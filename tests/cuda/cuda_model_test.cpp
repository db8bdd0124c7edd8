// CUDA vs CPU parity: for every architecture and every weight type the CPU computes, a
// synthetic model run on the GPU (CudaModel: the 40-token prompt through mmq / gemm and
// tensor-core attention, decode tokens through MMVQ; a Trace is attached, so these decode
// steps are not graphed: fused_test.cpp checks the graph against plain launches) and on
// the CPU (Session):
//  * the selected experts equal at >= 99% of (layer, position) pairs; where they differ
//    it is a near tie (the two sides' last selected weights within 2e-2);
//  * logits within max|d| / max|logit| <= 2e-2 (quantized) or 1e-3 (F32/F16) at every
//    position before a model's first near-tie flip (a flipped expert legitimately changes
//    that token and, through the KV cache, the ones after it; those positions are counted
//    and printed, not bounded). BF16: 4e-3. Both sides round activations to bf16 before
//    each dot (as llama.cpp does); where the f32 inputs agree to ~1e-7 an element within
//    that distance of a rounding boundary rounds to neighbouring bf16 values on the two
//    sides, a 2^-8 relative step that moves the logits by up to ~3e-3 (the same gap and
//    reasoning as tests/oracle/compare_synth.py's 2.5e-3 for the CPU against llama.cpp);
//  * argmax: at every compared position where the CPU's top two logits are further apart
//    than the logit bound, equal (>= 99% asserted, every mismatch must be a near tie);
//    the raw agreement over all compared positions, near ties included, is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "cuda/cuda_model.h"
#include "cuda_test_util.h"
#include "routing_trace.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda {
namespace {

using test::Routing;

// A 40-token prompt, then 8 decode steps: logits of every position, in order.
std::vector<float> run(Evaluator& e, const std::vector<int32_t>& ids, Trace* trace) {
  std::vector<float> all, step;
  EXPECT_TRUE(e.feed({ids.data(), 40}, true, &step, trace).ok());
  all = step;
  for (size_t t = 40; t < ids.size(); ++t) {
    EXPECT_TRUE(e.feed({&ids[t], 1}, false, &step, trace).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

// A routing flip under sigmoid scores with a selection bias (glm4moe) must be a near tie:
// the swapped experts' selection scores (score + bias, the CPU's, from pr and bias) within
// 5e-3 (compare_synth.py's TIE_GAP); with expert groups a flip may also come from two
// groups' scores (the sum of their two best selection scores) within twice that, which
// swaps whole groups. a, b: the CPU's and the device's selected experts.
void expect_selection_near_tie(const HParams& hp, const std::vector<float>& pr, const std::vector<float>& bias,
                               const std::set<int32_t>& a, const std::set<int32_t>& b,
                               const std::pair<uint32_t, uint32_t>& key) {
  auto score = [&](int32_t e) { return pr[static_cast<size_t>(e)] + (bias.empty() ? 0.0f : bias[static_cast<size_t>(e)]); };
  const uint32_t G = hp.n_expert_groups > 1 ? hp.n_expert_groups : 1, per = hp.n_expert / G;
  auto group_score = [&](int32_t e) {
    const uint32_t g = static_cast<uint32_t>(e) / per;
    std::vector<float> in_group;
    for (uint32_t i = g * per; i < (g + 1) * per; ++i) in_group.push_back(score(static_cast<int32_t>(i)));
    std::sort(in_group.begin(), in_group.end(), std::greater<float>());
    return in_group[0] + (in_group.size() > 1 ? in_group[1] : 0.0f);
  };
  float gap = 0, group_gap = 0;
  for (int32_t x : b) {
    if (a.count(x)) continue;
    for (int32_t y : a) {
      if (b.count(y)) continue;
      gap = std::max(gap, std::fabs(score(x) - score(y)));
      if (G > 1 && static_cast<uint32_t>(x) / per != static_cast<uint32_t>(y) / per) {
        group_gap = std::max(group_gap, std::fabs(group_score(x) - group_score(y)));
      } else {
        group_gap = 1.0f;  // same group: only the expert scores can tie
      }
    }
  }
  EXPECT_TRUE(gap < 5e-3 || (G > 1 && group_gap < 1e-2))
      << "not a near tie: layer " << key.first << " pos " << key.second << " expert gap " << gap << " group gap " << group_gap;
}

TEST(CudaModel, LogitsAndRoutingMatchTheCpuOnEveryArchitectureAndType) {
  MT_SKIP_WITHOUT_DEVICE();
  uint64_t positions = 0, argmax_equal = 0, routes = 0, routes_equal = 0, positions_all = 0, argmax_equal_all = 0;
  uint64_t decisive = 0, decisive_equal = 0;
  const std::vector<const char*> every_type = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k",
                                               "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4", "q4_k_m"};
  // The Gated DeltaNet hybrids and glm4moe share the kernels above: their own operations
  // (conv, delta rule, gated norm, gated attention; the general router) at the float types
  // and the common mixes.
  const std::vector<const char*> hybrid_types = {"f32", "f16", "q8_0", "q4_k", "q4_k_m"};
  const char* only = std::getenv("MT_CUDA_PARITY_ARCH");  // e.g. qwen35moe: one architecture
  // gpt-oss: sinks, windows, YaRN, biases, the clamped SwiGLU, softmax over the selected
  // (MXFP4 experts as published); laguna: per-layer heads and RoPE, the softplus gate.
  const std::vector<const char*> oai_types = {"f32", "f16", "q8_0", "q4_k", "mxfp4", "q4_k_m"};
  // deepseek2 (latent attention): the V3-like tiny model (q low-rank pair, YaRN, sigmoid +
  // bias + groups + scale) at the common types, and "v2-" the V2-Lite-like preset (one
  // attn_q, plain RoPE, softmax routing, 2 shared experts).
  const std::vector<const char*> mla_types = {"f32", "f16", "q8_0", "q4_k", "q4_k_m", "v2-f16", "v2-q4_k"};
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kLlama, Arch::kOlmoe, Arch::kQwen3Next, Arch::kQwen35Moe,
                    Arch::kGlm4Moe, Arch::kGptOss, Arch::kLaguna, Arch::kDeepseek2}) {
    if (only != nullptr && arch_info(arch).name != only) continue;
    const bool newer = arch_info(arch).linear_attention || arch == Arch::kGlm4Moe || arch == Arch::kLaguna;
    const std::vector<const char*>& types =
        arch == Arch::kGptOss ? oai_types : arch == Arch::kDeepseek2 ? mla_types : newer ? hybrid_types : every_type;
    for (const char* quant : types) {
      const std::string name = std::string(arch_info(arch).name) + "-" + quant;
      SCOPED_TRACE(name);
      const bool v2 = std::string(quant).rfind("v2-", 0) == 0;
      synth::SynthConfig c = v2 ? *synth::preset("tiny-deepseek2-v2") : synth::tiny_for(arch);
      auto mix = synth::parse_quant_mix(v2 ? quant + 3 : quant);
      ASSERT_TRUE(mix.ok()) << quant;
      c.quant = *mix;
      const std::string path = mt::test::temp_path(name + ".gguf");
      ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
      auto cpu_model = Model::load(path, {0, true});
      auto gpu_host = Model::load(path, {0, false});
      ASSERT_TRUE(cpu_model.ok() && gpu_host.ok());
      auto gpu = CudaModel::load(**gpu_host);
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      const uint32_t V = (*cpu_model)->hparams().n_vocab;
      std::vector<int32_t> ids(48);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 193 + 11) % V);

      auto cpu_seq = Session::create(**cpu_model, 64);
      ASSERT_TRUE(cpu_seq.ok());
      auto gpu_seq = (*gpu)->new_sequence(64);
      ASSERT_TRUE(gpu_seq.ok()) << gpu_seq.status().to_string();
      Routing cpu_r, gpu_r;
      const std::vector<float> ref = run(*cpu_seq, ids, &cpu_r);
      const std::vector<float> got = run(**gpu_seq, ids, &gpu_r);
      ASSERT_EQ(ref.size(), got.size());
      const size_t n_pos = ref.size() / V;
      // The first position where a layer's selected experts differ.
      ASSERT_EQ(cpu_r.sel.size(), gpu_r.sel.size());
      size_t first_flip = n_pos;
      for (const auto& [key, cs] : cpu_r.sel) {
        const auto& gs = gpu_r.sel.at(key);
        ++routes;
        const std::set<int32_t> a(cs.first.begin(), cs.first.end()), b(gs.first.begin(), gs.first.end());
        if (a == b) {
          ++routes_equal;
        } else {
          first_flip = std::min<size_t>(first_flip, key.second);
          const HParams& hp = (*cpu_model)->hparams();
          if (hp.gating == ExpertGating::kSigmoid) {
            expect_selection_near_tie(hp, cpu_r.probs.at(key), (*cpu_model)->vectors()[key.first].exp_probs_b, a, b,
                                      key);
          } else {
            EXPECT_NEAR(cs.second.back(), gs.second.back(), 2e-2) << "not a near tie: layer " << key.first << " pos " << key.second;
          }
        }
      }
      const bool exact_type = std::string(quant) == "f32" || std::string(quant) == "f16";
      const double bound = exact_type ? 1e-3 : std::string(quant) == "bf16" ? 4e-3 : 2e-2;
      double worst = 0, worst_all = 0;
      for (size_t p = 0; p < n_pos; ++p) {
        const float* a = &ref[p * V];
        const float* b = &got[p * V];
        float scale = 0, diff = 0;
        for (uint32_t i = 0; i < V; ++i) {
          scale = std::max(scale, std::fabs(a[i]));
          diff = std::max(diff, std::fabs(a[i] - b[i]));
        }
        const double rel = static_cast<double>(diff / scale);
        const bool same = (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
        worst_all = std::max(worst_all, rel);
        ++positions_all;
        argmax_equal_all += same;
        if (p >= first_flip) continue;
        worst = std::max(worst, rel);
        ++positions;
        argmax_equal += same;
        std::vector<float> top(a, a + V);
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
        const bool near_tie = top[0] - top[1] < bound * scale;
        EXPECT_TRUE(same || near_tie) << "argmax differs at position " << p << " where the CPU's top-2 gap "
                                      << top[0] - top[1] << " is not a near tie";
        if (!near_tie) {
          ++decisive;
          decisive_equal += same;
        }
      }
      EXPECT_LE(worst, bound);
      std::printf("  %-22s max rel %.2e before pos %zu (first routing flip), %.2e over all %zu\n", name.c_str(), worst,
                  first_flip, worst_all, n_pos);
    }
  }
  std::printf("argmax equal %llu/%llu where the top-2 gap exceeds the bound; %llu/%llu before flips, near ties included "
              "(%llu/%llu at all positions), routing equal %llu/%llu\n",
              static_cast<unsigned long long>(decisive_equal), static_cast<unsigned long long>(decisive),
              static_cast<unsigned long long>(argmax_equal), static_cast<unsigned long long>(positions),
              static_cast<unsigned long long>(argmax_equal_all), static_cast<unsigned long long>(positions_all),
              static_cast<unsigned long long>(routes_equal), static_cast<unsigned long long>(routes));
  EXPECT_GE(static_cast<double>(decisive_equal), 0.99 * static_cast<double>(decisive));
  EXPECT_GE(static_cast<double>(routes_equal), 0.99 * static_cast<double>(routes));
}

TEST(CudaModel, BadInputIsAStatus) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  const std::string path = mt::test::temp_path("bad-input.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto interleaved = Model::load(path, {0, true});
  ASSERT_TRUE(interleaved.ok());
  auto host = Model::load(path, {0, false});
  ASSERT_TRUE(host.ok());
  auto gpu = CudaModel::load(**host);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto seq = (*gpu)->new_sequence(8);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  const int32_t bad = static_cast<int32_t>((*host)->hparams().n_vocab);
  EXPECT_FALSE((*seq)->feed({&bad, 1}, false, &logits).ok());
  std::vector<int32_t> too_many(9, 1);
  EXPECT_FALSE((*seq)->feed(too_many, false, &logits).ok());
  EXPECT_FALSE((*gpu)->new_sequence(0).ok());
  EXPECT_FALSE((*gpu)->new_sequence(8, QuantType::Q4_K).ok());
  auto huge = (*gpu)->new_sequence(2000000000u);
  EXPECT_FALSE(huge.ok());
}

}  // namespace
}  // namespace mt::cuda
