// expert_outputs (model/layers.h), the CPU side of the GPU's hybrid decode: each routed
// expert's row computed from the layer's normed input, weighted and summed in rank order,
// equals moe_block's FFN output bit for bit, for a prompt batch and decode steps, with
// the experts interleaved (CPU layout) or read from the file's layout (as with CUDA).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <utility>

#include "model/layers.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

// The rows of one step: per layer, the normed input, the routing and the FFN output.
struct StepRows : public Trace {
  struct Layer {
    std::vector<std::vector<float>> h, out;
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<float>> wts;
  };
  std::map<uint32_t, Layer> layers;
  void tensor(const char* name, uint32_t layer, uint32_t, std::span<const float> row) override {
    if (std::strcmp(name, "ffn_norm") == 0) layers[layer].h.emplace_back(row.begin(), row.end());
    if (std::strcmp(name, "ffn_out") == 0) layers[layer].out.emplace_back(row.begin(), row.end());
  }
  void routing(uint32_t layer, uint32_t, std::span<const int32_t> experts, std::span<const float> weights) override {
    layers[layer].ids.emplace_back(experts.begin(), experts.end());
    layers[layer].wts.emplace_back(weights.begin(), weights.end());
  }
};

// Recomputes every MoE layer's output of the step through expert_outputs.
void expect_equal_outputs(const Model& model, const StepRows& rows) {
  const HParams& hp = model.hparams();
  const size_t E = hp.n_embd, K = hp.n_expert_used;
  ASSERT_FALSE(rows.layers.empty());
  for (const auto& [l, L] : rows.layers) {
    const auto T = static_cast<uint32_t>(L.h.size());
    ASSERT_EQ(L.out.size(), T);
    ASSERT_EQ(L.ids.size(), T);
    std::vector<float> h(T * E);
    for (uint32_t t = 0; t < T; ++t) std::copy(L.h[t].begin(), L.h[t].end(), &h[t * E]);
    std::vector<ExpertJob> jobs;
    for (uint32_t t = 0; t < T; ++t) {
      for (size_t k = 0; k < K; ++k) jobs.push_back({static_cast<uint32_t>(L.ids[t][k]), t});
    }
    std::vector<float> d(jobs.size() * E);
    expert_outputs(model.weights().layers[l], h.data(), T, E, jobs, d.data(), model.pool());
    for (uint32_t t = 0; t < T; ++t) {
      std::vector<float> o(E, 0.0f);
      for (size_t k = 0; k < K; ++k) {
        for (size_t j = 0; j < E; ++j) o[j] += d[(t * K + k) * E + j] * L.wts[t][k];
      }
      ASSERT_EQ(std::memcmp(o.data(), L.out[t].data(), E * sizeof(float)), 0) << "layer " << l << " token " << t;
    }
  }
}

TEST(ExpertOutputs, WeightedInRankOrderTheyEqualTheMoeBlocksOutput) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  const std::string path = test::temp_path("expert-outputs.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  for (bool interleave : {true, false}) {
    auto loaded = Model::load(path, {2, interleave});
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const Model& model = **loaded;
    auto s = Session::create(model, 64);
    ASSERT_TRUE(s.ok());
    std::vector<int32_t> ids(20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 3) % model.hparams().n_vocab);
    std::vector<float> logits;
    StepRows prompt;
    ASSERT_TRUE(s->feed({ids.data(), 16}, false, &logits, &prompt).ok());
    expect_equal_outputs(model, prompt);
    for (size_t t = 16; t < ids.size(); ++t) {
      StepRows one;
      ASSERT_TRUE(s->feed({&ids[t], 1}, false, &logits, &one).ok());
      expect_equal_outputs(model, one);
    }
  }
}

TEST(ExpertOutputs, NoJobsWritesNothing) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  const std::string path = test::temp_path("expert-outputs-empty.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto loaded = Model::load(path, {1});
  ASSERT_TRUE(loaded.ok());
  const Model& model = **loaded;
  const size_t E = model.hparams().n_embd;
  std::vector<float> h(E, 0.5f), out(E, 7.0f);
  uint32_t moe = 0;
  while (!model.weights().layers[moe].is_moe()) ++moe;
  expert_outputs(model.weights().layers[moe], h.data(), 1, E, {}, out.data(), model.pool());
  for (float v : out) EXPECT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace mt
