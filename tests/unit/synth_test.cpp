// Synthetic models: presets reproduce the seeds' exact geometry, every architecture has
// llama.cpp's keys and tensor names, quant mixes pick llama.cpp's types, weights have the
// intended scale, output is deterministic, and bad configs get clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include "experts/geometry.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "quant/reference.h"
#include "synth/synth.h"
#include "synth/tensor_types.h"
#include "synth/weights.h"
#include "test_util.h"

namespace mt::synth {
namespace {

using gguf::GgufFile;

GgufFile write_and_open(const SynthConfig& c, const std::string& name) {
  const std::string path = test::temp_path(name);
  auto s = write_model(c, {path, false});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return std::move(f).value();
}

std::vector<float> dequantized(const GgufFile& f, const std::string& tensor) {
  const gguf::TensorInfo* t = f.find_tensor(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  if (t == nullptr) return {};
  std::vector<float> out(t->n_elements());
  dequantize_row(t->type, f.tensor_data(*t).data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

double stddev(const std::vector<float>& v, size_t begin = 0, size_t end = 0) {
  if (end == 0) end = v.size();
  double s = 0, s2 = 0;
  for (size_t i = begin; i < end; ++i) {
    s += v[i];
    s2 += static_cast<double>(v[i]) * v[i];
  }
  const double n = static_cast<double>(end - begin);
  return std::sqrt(std::max(0.0, s2 / n - (s / n) * (s / n)));
}

TEST(SynthPreset, LagunaSExactBankBytes) {
  auto c = preset("laguna-s");
  ASSERT_TRUE(c.ok());
  c->sparse = true;
  GgufFile f = write_and_open(*c, "laguna.gguf");
  auto g = read_expert_geometry(f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->layers.size(), 47u);
  EXPECT_EQ(g->n_expert, 256u);
  EXPECT_EQ(g->compact_bytes, 91653931008ull);   // 85.359375 GiB (seed 000)
  EXPECT_EQ(g->padded_bytes, 227096395776ull);   // 211.5 GiB
  ASSERT_EQ(g->groups.size(), 2u);
  EXPECT_EQ(g->groups[0].bytes_per_expert(), 18ull << 20);       // BF16 layers
  EXPECT_EQ(g->groups[0].layers.size(), 8u);
  EXPECT_EQ(g->groups[1].bytes_per_expert(), 5308416ull);        // 5.0625 MiB, Q4_K
  EXPECT_EQ(g->groups[1].layers.size(), 39u);
  EXPECT_EQ(*f.get_u32("laguna.expert_used_count"), 10u);
  EXPECT_EQ(*f.get_u32("laguna.leading_dense_block_count"), 1u);
}

TEST(SynthPreset, Ornith35bExactBankBytes) {
  auto c = preset("ornith-35b");
  ASSERT_TRUE(c.ok());
  c->sparse = true;
  GgufFile f = write_and_open(*c, "ornith.gguf");
  auto g = read_expert_geometry(f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->compact_bytes, 19503513600ull);
  EXPECT_EQ(g->padded_bytes, 20887633920ull);
  EXPECT_EQ(g->layers[0].gate().bytes_per_expert + g->layers[0].up().bytes_per_expert, 1179648u);
  EXPECT_EQ(g->max_bytes[2], 860160u);
}

TEST(SynthPreset, EveryPresetIsValidAndSparseWritable) {
  for (const std::string& name : preset_names()) {
    auto c = preset(name);
    ASSERT_TRUE(c.ok()) << name;
    c->sparse = true;
    EXPECT_TRUE(validate(*c).ok()) << name << ": " << validate(*c).to_string();
    GgufFile f = write_and_open(*c, name + ".gguf");
    auto g = read_expert_geometry(f);
    ASSERT_TRUE(g.ok()) << name;
    EXPECT_EQ(g->layers.size(), c->n_layer - c->n_dense_lead) << name;  // NextN blocks are not tiered
    EXPECT_EQ(g->n_expert, c->n_expert) << name;
  }
  EXPECT_FALSE(preset("no-such-model").ok());
  EXPECT_NE(preset("no-such-model").status().message().find("laguna-s"), std::string::npos);
}

// glm4moe: a leading dense block (ffn_gate/up/down, no router), MoE blocks with the F32
// exp_probs_b selection bias and an ungated shared expert, post_attention_norm, a NextN
// block after the main stack, the routing keys in llama.cpp's types; the loader's main
// stack leaves the NextN block out, and so does the expert geometry.
TEST(SynthArch, Glm4MoeDenseLeadNextnAndRoutingKeys) {
  SynthConfig c = tiny_for(Arch::kGlm4Moe);
  GgufFile f = write_and_open(c, "glm4moe-names.gguf");
  EXPECT_EQ(*f.get_u32("glm4moe.block_count"), c.n_layer + 1);
  EXPECT_EQ(*f.get_u32("glm4moe.nextn_predict_layers"), 1u);
  EXPECT_EQ(*f.get_u32("glm4moe.leading_dense_block_count"), 1u);
  EXPECT_EQ(*f.get_u32("glm4moe.expert_shared_count"), 1u);
  EXPECT_EQ(*f.get_u32("glm4moe.expert_gating_func"), 2u);
  EXPECT_EQ(*f.get_u32("glm4moe.rope.dimension_count"), c.head_dim / 2);
  EXPECT_EQ(f.find("glm4moe.expert_weights_norm")->type, gguf::ValueType::kBool);
  EXPECT_FLOAT_EQ(*f.get_f32("glm4moe.expert_weights_scale"), 2.5f);
  EXPECT_NE(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);
  for (uint32_t l = 0; l <= c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_NE(f.find_tensor(b + "post_attention_norm.weight"), nullptr) << l;
    EXPECT_EQ(f.find_tensor(b + "ffn_norm.weight"), nullptr) << l;
    if (l == 0) continue;
    const gguf::TensorInfo* bias = f.find_tensor(b + "exp_probs_b.bias");
    ASSERT_NE(bias, nullptr) << l;
    EXPECT_EQ(bias->type, QuantType::F32);
    EXPECT_EQ(bias->ne[0], c.n_expert);
    EXPECT_EQ(f.find_tensor(b + "ffn_up_shexp.weight")->ne[1], c.n_ff_exp);
    EXPECT_EQ(f.find_tensor(b + "ffn_gate_inp_shexp.weight"), nullptr);
    EXPECT_EQ(f.find_tensor(b + "nextn.eh_proj.weight") != nullptr, l == c.n_layer) << l;
  }
  auto hp = read_hparams(f);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  EXPECT_EQ(hp->n_layer, c.n_layer);
  EXPECT_EQ(hp->n_layer_file, c.n_layer + 1);
  EXPECT_EQ(hp->gating, ExpertGating::kSigmoid);
  EXPECT_TRUE(hp->renormalize);
  EXPECT_FLOAT_EQ(hp->expert_weights_scale, 2.5f);
  EXPECT_EQ(hp->n_expert_groups, 4u);
  EXPECT_EQ(hp->n_ff_shexp, c.n_ff_exp);
  auto g = read_expert_geometry(f);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->layers.size(), c.n_layer - 1);
  auto m = Model::load(test::temp_path("glm4moe-names.gguf"), {1});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE((*m)->weights().layers[0].is_moe());
  EXPECT_TRUE((*m)->weights().layers[1].exp_probs_b.present());
  EXPECT_EQ((*m)->weights().layers.size(), c.n_layer);
}

// A glm4moe file whose routing keys break the rules gets an error naming the key.
TEST(SynthArch, Glm4MoeBadRoutingKeysAreNamed) {
  SynthConfig c = tiny_for(Arch::kGlm4Moe);
  c.sparse = true;
  GgufFile src = write_and_open(c, "glm4moe-src.gguf");
  auto with = [&](const std::string& key, gguf::Value value, const std::string& name) {
    gguf::GgufWriter w;
    for (const auto& kv : src.metadata()) w.set(std::string(kv.key), std::string(kv.key) == key ? value : kv.value);
    for (const auto& t : src.tensors()) w.add_tensor(std::string(t.name), t.type, {t.ne.begin(), t.ne.begin() + t.n_dims}, {});
    gguf::WriteOptions sparse;
    sparse.sparse = true;
    EXPECT_TRUE(w.write(test::temp_path(name), sparse).ok());
    return Model::load(test::temp_path(name), {1}).status();
  };
  Status s = with("glm4moe.expert_gating_func", gguf::Value::u32(3), "glm-gating.gguf");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("expert_gating_func 3"), std::string::npos) << s.to_string();
  s = with("glm4moe.expert_group_count", gguf::Value::u32(3), "glm-groups.gguf");
  EXPECT_NE(s.message().find("expert_group_count 3"), std::string::npos) << s.to_string();
  s = with("glm4moe.nextn_predict_layers", gguf::Value::u32(4), "glm-nextn.gguf");
  EXPECT_NE(s.message().find("nextn_predict_layers 4"), std::string::npos) << s.to_string();
  s = with("glm4moe.leading_dense_block_count", gguf::Value::u32(2), "glm-dense.gguf");
  EXPECT_NE(s.message().find("blk.1.ffn_gate_inp.weight in a leading dense layer"), std::string::npos) << s.to_string();
}

// qwen3next / qwen35moe: the Gated DeltaNet tensors and keys as llama.cpp's converter
// writes them, the gated attn_q, the MTP block; the loader's view of the layers; bad keys,
// IMROPE sections that use the 4th position stream and the legacy ssm_in layout are named.
TEST(SynthArch, HybridGatedDeltaNetTensorsKeysAndBadFiles) {
  SynthConfig c = tiny_for(Arch::kQwen35Moe);
  c.sparse = true;
  GgufFile src = write_and_open(c, "qwen35moe-src.gguf");
  const gguf::TensorInfo* qkv = src.find_tensor("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ne[1], 2u * 2 * 64 + 4 * 64);  // q and k heads (2 x 64 each), 4 value heads of 64
  ASSERT_NE(src.find_tensor("blk.0.ssm_conv1d.weight"), nullptr);
  EXPECT_EQ(src.find_tensor("blk.0.ssm_conv1d.weight")->type, QuantType::F32);
  EXPECT_NE(src.find_tensor("blk.2.ssm_beta.weight"), nullptr);
  EXPECT_EQ(src.find_tensor("blk.3.ssm_beta.weight"), nullptr);  // layer 3: full attention
  ASSERT_NE(src.find_tensor("blk.3.attn_q.weight"), nullptr);
  EXPECT_EQ(src.find_tensor("blk.3.attn_q.weight")->ne[1], 2u * 4 * 64);  // query | gate per head
  EXPECT_NE(src.find_tensor("blk.4.nextn.eh_proj.weight"), nullptr);       // the MTP block
  auto hp = read_hparams(src);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  EXPECT_EQ(hp->n_layer, 4u);
  EXPECT_EQ(hp->n_nextn, 1u);
  EXPECT_TRUE(hp->ssm_tiled);
  EXPECT_EQ(hp->recurrent, (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ(hp->delta_state_floats(), 4u * 64 * 64);

  auto rewrite = [&](const std::string& name, const std::function<void(gguf::GgufWriter&)>& edit,
                     const std::string& rename_from = "", const std::string& rename_to = "") {
    gguf::GgufWriter w;
    for (const auto& kv : src.metadata()) w.set(std::string(kv.key), kv.value);
    edit(w);
    for (const auto& t : src.tensors()) {
      const std::string n = std::string(t.name) == rename_from ? rename_to : std::string(t.name);
      w.add_tensor(n, t.type, {t.ne.begin(), t.ne.begin() + t.n_dims}, {});
    }
    gguf::WriteOptions sparse;
    sparse.sparse = true;
    EXPECT_TRUE(w.write(test::temp_path(name), sparse).ok());
    return Model::load(test::temp_path(name), {1}).status();
  };
  Status s = rewrite("q35-inner.gguf", [](gguf::GgufWriter& w) { w.set_u32("qwen35moe.ssm.inner_size", 100); });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("ssm.inner_size 100"), std::string::npos) << s.to_string();
  s = rewrite("q35-rank.gguf", [](gguf::GgufWriter& w) { w.set_u32("qwen35moe.ssm.time_step_rank", 3); });
  EXPECT_NE(s.message().find("time_step_rank 3"), std::string::npos) << s.to_string();
  s = rewrite("q35-sections.gguf", [](gguf::GgufWriter& w) { w.set_i32_array("qwen35moe.rope.dimension_sections", {1, 1, 1, 1}); });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("4th position stream"), std::string::npos) << s.to_string();
  s = rewrite("q35-legacy.gguf", [](gguf::GgufWriter&) {}, "blk.1.attn_qkv.weight", "blk.1.ssm_in.weight");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("blk.1.ssm_in.weight"), std::string::npos) << s.to_string();
  s = rewrite("q35-ok.gguf", [](gguf::GgufWriter&) {});
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// deepseek2 in the MLA layout: the latent tensors and keys as llama.cpp's converter writes
// them; the loader reads the latent geometry and keeps one latent cache row per position;
// a file without the MLA keys (the legacy attn_kv_b layout) is refused by name.
TEST(SynthArch, Deepseek2MlaTensorsKeysAndLatentCache) {
  SynthConfig c = tiny_for(Arch::kDeepseek2);
  GgufFile f = write_and_open(c, "deepseek2-names.gguf");
  EXPECT_EQ(*f.get_u32("deepseek2.attention.head_count_kv"), 1u);
  EXPECT_EQ(*f.get_u32("deepseek2.attention.key_length"), c.kv_lora_rank + c.n_rot);
  EXPECT_EQ(*f.get_u32("deepseek2.attention.value_length"), c.kv_lora_rank);
  EXPECT_EQ(*f.get_u32("deepseek2.attention.key_length_mla"), c.head_dim);
  EXPECT_EQ(*f.get_u32("deepseek2.attention.value_length_mla"), c.mla_v);
  const gguf::TensorInfo* kb = f.find_tensor("blk.1.attn_k_b.weight");
  ASSERT_NE(kb, nullptr);
  EXPECT_EQ(kb->ne[0], c.head_dim - c.n_rot);
  EXPECT_EQ(kb->ne[1], c.kv_lora_rank);
  EXPECT_EQ(kb->ne[2], c.n_head);
  EXPECT_EQ(f.find_tensor("blk.1.attn_kv_a_mqa.weight")->ne[1], c.kv_lora_rank + c.n_rot);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight"), nullptr);
  auto m = Model::load(test::temp_path("deepseek2-names.gguf"), {1});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const HParams& hp = (*m)->hparams();
  EXPECT_TRUE(hp.mla);
  EXPECT_EQ(hp.kv_dim(), c.kv_lora_rank + c.n_rot);
  EXPECT_EQ(hp.q_dim(), c.n_head * c.head_dim);
  // YaRN 40x with mscale_all_dim 0.707: llama.cpp's rope attn factor is the ratio of the two
  // mscales (here 1) over the magnitude the rope multiplies back in, 1 + 0.1 ln 40.
  EXPECT_EQ(hp.yarn_ext, 1.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f / 40.0f);
  EXPECT_NEAR(hp.yarn_log_mul, 0.707f, 1e-5);
  EXPECT_NEAR(hp.rope_attn_factor, 1.0f / (1.0f + 0.1f * std::log(40.0f)), 1e-6);
  EXPECT_EQ(hp.n_ctx_orig, 4096u);
  auto kv = KvCache::create(hp.n_layer, 16, hp.kv_dim(), QuantType::F16, true);
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->bytes(), uint64_t{hp.n_layer} * 16 * hp.kv_dim() * 2);  // K rows only
  EXPECT_EQ(kv->v_row(1, 3), kv->k_row(1, 3));

  // The legacy layout (no key_length_mla): refused by name.
  c.sparse = true;
  GgufFile src = write_and_open(c, "deepseek2-src.gguf");
  gguf::GgufWriter w;
  for (const auto& kv_pair : src.metadata()) {
    if (std::string(kv_pair.key) != "deepseek2.attention.key_length_mla") w.set(std::string(kv_pair.key), kv_pair.value);
  }
  for (const auto& t : src.tensors()) w.add_tensor(std::string(t.name), t.type, {t.ne.begin(), t.ne.begin() + t.n_dims}, {});
  gguf::WriteOptions sparse;
  sparse.sparse = true;
  ASSERT_TRUE(w.write(test::temp_path("deepseek2-legacy.gguf"), sparse).ok());
  auto legacy = Model::load(test::temp_path("deepseek2-legacy.gguf"), {1});
  ASSERT_FALSE(legacy.ok());
  EXPECT_EQ(legacy.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(legacy.status().message().find("legacy attn_kv_b layout"), std::string::npos) << legacy.status().to_string();
}

// The tensor set of each architecture, as in ../shared/reference/moe_arch_facts.md.
TEST(SynthArch, TensorNamesShapesAndKeys) {
  struct Expect {
    Arch arch;
    std::vector<std::string> layer_tensors;
    std::vector<std::string> keys;
  };
  const std::vector<Expect> cases = {
      {Arch::kQwen3Moe, {"attn_q_norm.weight", "attn_k_norm.weight", "ffn_gate_inp.weight"},
       {"qwen3moe.expert_feed_forward_length", "qwen3moe.attention.key_length"}},
      {Arch::kQwen2Moe,
       {"attn_q.bias", "attn_k.bias", "attn_v.bias", "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
        "ffn_up_shexp.weight", "ffn_down_shexp.weight"},
       {"qwen2moe.expert_feed_forward_length", "qwen2moe.expert_shared_feed_forward_length"}},
      {Arch::kLlama, {"ffn_gate_exps.weight"}, {"llama.feed_forward_length", "llama.rope.dimension_count"}},
      {Arch::kOlmoe, {"attn_q_norm.weight", "attn_k_norm.weight"}, {"olmoe.feed_forward_length"}},
  };
  for (const Expect& e : cases) {
    SynthConfig c = tiny_for(e.arch);
    GgufFile f = write_and_open(c, std::string(arch_info(e.arch).name) + "-names.gguf");
    EXPECT_EQ(*f.get_string("general.architecture"), arch_info(e.arch).name);
    for (uint32_t l = 0; l < c.n_layer; ++l) {
      for (const std::string& t : e.layer_tensors) {
        EXPECT_NE(f.find_tensor("blk." + std::to_string(l) + "." + t), nullptr) << arch_info(e.arch).name << " " << t;
      }
    }
    for (const std::string& k : e.keys) EXPECT_TRUE(f.get_u32(k).ok()) << k;
    // llama.cpp reads counts strictly as u32.
    const std::string p(arch_info(e.arch).name);
    for (const char* k : {".block_count", ".embedding_length", ".expert_count", ".expert_used_count",
                          ".attention.head_count", ".attention.head_count_kv", ".context_length"}) {
      const gguf::Value* v = f.find(p + k);
      ASSERT_NE(v, nullptr) << p + k;
      EXPECT_EQ(v->type, gguf::ValueType::kU32) << p + k;
    }
    EXPECT_EQ(f.find(p + ".attention.layer_norm_rms_epsilon")->type, gguf::ValueType::kF32);
    // Shapes: gate/up (n_embd, n_ff, E), down (n_ff, n_embd, E), router (n_embd, E) in F32.
    const gguf::TensorInfo* up = f.find_tensor("blk.0.ffn_up_exps.weight");
    const gguf::TensorInfo* down = f.find_tensor("blk.0.ffn_down_exps.weight");
    const gguf::TensorInfo* router = f.find_tensor("blk.0.ffn_gate_inp.weight");
    ASSERT_TRUE(up && down && router);
    EXPECT_EQ(up->ne[0], c.n_embd);
    EXPECT_EQ(up->ne[1], c.n_ff_exp);
    EXPECT_EQ(up->ne[2], c.n_expert);
    EXPECT_EQ(down->ne[0], c.n_ff_exp);
    EXPECT_EQ(down->ne[1], c.n_embd);
    EXPECT_EQ(router->type, QuantType::F32);
    EXPECT_EQ(router->ne[1], c.n_expert);
    EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->type, QuantType::F32);
  }
}

TEST(SynthQuant, Q4KMixFollowsMoreBitsRule) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.n_layer = 16;
  c.quant = *parse_quant_mix("q4_k_m");
  c.sparse = true;
  GgufFile f = write_and_open(c, "q4km.gguf");
  int q6 = 0;
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const auto* down = f.find_tensor("blk." + std::to_string(l) + ".ffn_down_exps.weight");
    const auto* gate = f.find_tensor("blk." + std::to_string(l) + ".ffn_gate_exps.weight");
    EXPECT_EQ(gate->type, QuantType::Q4_K);
    EXPECT_EQ(down->type, use_more_bits(l, c.n_layer) ? QuantType::Q6_K : QuantType::Q4_K) << l;
    q6 += down->type == QuantType::Q6_K;
  }
  EXPECT_EQ(q6, 8);  // 16 layers: 0, 1, 4, 7, 10, 13, 14, 15
  EXPECT_EQ(f.find_tensor("output.weight")->type, QuantType::Q6_K);
  EXPECT_EQ(*f.get_u32("general.file_type"), 15u);
}

TEST(SynthQuant, RowsNotMultipleOf256FallBackLikeLlamaQuantize) {
  auto c = preset("qwen1.5-moe-a2.7b");  // expert width 1408 = 5.5 x 256
  ASSERT_TRUE(c.ok());
  c->quant = *parse_quant_mix("q4_k");
  c->sparse = true;
  GgufFile f = write_and_open(*c, "fallback.gguf");
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_exps.weight")->type, QuantType::Q4_K);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down_exps.weight")->type, QuantType::Q5_0);
}

TEST(SynthQuant, LayerOverrideAndParsing) {
  auto o = parse_layer_override("0-2,5=bf16");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->layers, (std::vector<uint32_t>{0, 1, 2, 5}));
  EXPECT_EQ(o->type, QuantType::BF16);
  EXPECT_FALSE(parse_layer_override("0-2").ok());
  EXPECT_FALSE(parse_layer_override("x=bf16").ok());
  EXPECT_FALSE(parse_layer_override("3-1=bf16").ok());
  EXPECT_FALSE(parse_layer_override("1=nope").ok());
  EXPECT_FALSE(parse_quant_mix("q9_9").ok());
  EXPECT_EQ(parse_quant_mix("q8_k").status().code(), StatusCode::kUnimplemented);

  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.layer_types.push_back(*parse_layer_override("1=bf16"));
  c.sparse = true;
  GgufFile f = write_and_open(c, "override.gguf");
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight")->type, QuantType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_up_exps.weight")->type, QuantType::BF16);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight")->type, QuantType::Q8_0);  // experts only
}

TEST(SynthValidate, BadConfigsNameTheProblem) {
  auto msg = [](SynthConfig c) { return validate(c).message(); };
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  SynthConfig bad = c;
  bad.n_head = 5;
  EXPECT_NE(msg(bad).find("multiple of head_count_kv"), std::string::npos);
  bad = c;
  bad.n_expert_used = 9;
  EXPECT_NE(msg(bad).find("experts used"), std::string::npos);
  bad = tiny_for(Arch::kOlmoe);
  bad.n_head_kv = 2;
  EXPECT_NE(msg(bad).find("olmoe"), std::string::npos);
  bad = tiny_for(Arch::kQwen2Moe);
  bad.tie_output = true;
  EXPECT_NE(msg(bad).find("requires output.weight"), std::string::npos);
  bad = c;
  bad.layer_types.push_back({{7}, QuantType::BF16});
  EXPECT_NE(msg(bad).find("layer 7"), std::string::npos);
  bad = c;
  bad.n_expert = 2000;
  EXPECT_FALSE(validate(bad).ok());
}

TEST(SynthWeights, DeterministicForASeed) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  ASSERT_TRUE(write_model(c, {test::temp_path("det1.gguf"), false}).ok());
  ASSERT_TRUE(write_model(c, {test::temp_path("det2.gguf"), false}).ok());
  c.seed = 2;
  ASSERT_TRUE(write_model(c, {test::temp_path("det3.gguf"), false}).ok());
  EXPECT_EQ(read(test::temp_path("det1.gguf")), read(test::temp_path("det2.gguf")));
  EXPECT_NE(read(test::temp_path("det1.gguf")), read(test::temp_path("det3.gguf")));
}

TEST(SynthWeights, ScalesAreRealistic) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.quant = *parse_quant_mix("f32");
  GgufFile f = write_and_open(c, "scales.gguf");
  const double inv_sqrt_embd = 1.0 / std::sqrt(static_cast<double>(c.n_embd));
  EXPECT_NEAR(stddev(dequantized(f, "blk.0.attn_q.weight")), inv_sqrt_embd, 0.1 * inv_sqrt_embd);
  EXPECT_NEAR(stddev(dequantized(f, "blk.0.ffn_up_exps.weight")), inv_sqrt_embd, 0.1 * inv_sqrt_embd);
  // Residual writers are scaled down by 1/sqrt(2 n_layer).
  const double down = 1.0 / std::sqrt(static_cast<double>(c.n_ff_exp)) / std::sqrt(2.0 * c.n_layer);
  EXPECT_NEAR(stddev(dequantized(f, "blk.1.ffn_down_exps.weight")), down, 0.1 * down);
  auto norm = dequantized(f, "blk.0.ffn_norm.weight");
  for (float w : norm) EXPECT_TRUE(w > 0.7f && w < 1.3f) << w;
}

TEST(SynthWeights, FastModeWritesValidQuantizedBlocks) {
  for (const char* q : {"q4_k_m", "q8_0", "iq4_xs", "mxfp4", "bf16"}) {
    SynthConfig c = tiny_for(Arch::kQwen3Moe);
    c.quant = *parse_quant_mix(q);
    c.fast = true;
    GgufFile f = write_and_open(c, std::string("fast-") + q + ".gguf");
    for (const gguf::TensorInfo& t : f.tensors()) {
      auto v = dequantized(f, std::string(t.name));
      for (float x : v) ASSERT_TRUE(std::isfinite(x)) << q << " " << t.name;
      if (std::string(t.name) == "blk.0.ffn_gate_exps.weight") {
        const double want = 1.0 / std::sqrt(static_cast<double>(c.n_embd));
        EXPECT_NEAR(stddev(v), want, 0.2 * want) << q;
      }
    }
  }
}

// --fast embeddings are pool rows rotated by whole blocks; the shared direction u is
// periodic so every row keeps the component that carries the router skew.
TEST(SynthWeights, FastEmbeddingsCarryTheSharedDirection) {
  for (const char* q : {"q4_k_m", "q8_0", "bf16"}) {
    SynthConfig c = tiny_for(Arch::kQwen3Moe);
    c.quant = *parse_quant_mix(q);
    c.fast = true;
    c.router_skew = 1.0f;
    GgufFile f = write_and_open(c, std::string("fast-u-") + q + ".gguf");
    const std::vector<float> u = shared_direction(c.seed, c.n_embd, /*periodic=*/true);
    const std::vector<float> embd = dequantized(f, "token_embd.weight");
    const size_t n_rows = embd.size() / c.n_embd;
    const double want = 0.5 * std::sqrt(static_cast<double>(c.n_embd));  // synth.cpp's embd_u
    double sum = 0, lowest = 1e30;
    for (size_t r = 0; r < n_rows; ++r) {
      double dot = 0;
      for (uint32_t i = 0; i < c.n_embd; ++i) dot += static_cast<double>(embd[r * c.n_embd + i]) * u[i];
      sum += dot;
      lowest = std::min(lowest, dot);
    }
    EXPECT_NEAR(sum / static_cast<double>(n_rows), want, 0.1 * want) << q;
    EXPECT_GT(lowest, 0.5 * want) << q;
  }
}

// Router skew: the popularity of experts, measured on router logits of normalised token
// embeddings (the shared direction dominates the routing bias in every layer).
std::vector<int> top1_counts(const GgufFile& f, uint32_t layer, uint32_t n_embd, uint32_t n_expert) {
  auto embd = dequantized(f, "token_embd.weight");
  auto router = dequantized(f, "blk." + std::to_string(layer) + ".ffn_gate_inp.weight");
  const size_t n_tokens = embd.size() / n_embd;
  std::vector<int> counts(n_expert, 0);
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* x = &embd[t * n_embd];
    double ms = 0;
    for (uint32_t i = 0; i < n_embd; ++i) ms += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ms / n_embd + 1e-6);
    int best = 0;
    double best_logit = -1e30;
    for (uint32_t e = 0; e < n_expert; ++e) {
      double logit = 0;
      for (uint32_t i = 0; i < n_embd; ++i) logit += router[e * n_embd + i] * x[i] * inv;
      if (logit > best_logit) best_logit = logit, best = static_cast<int>(e);
    }
    ++counts[best];
  }
  return counts;
}

TEST(SynthWeights, RouterSkewMakesPopularityZipfLike) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.quant = *parse_quant_mix("f32");
  c.n_vocab = 4000;
  c.n_expert = 16;
  GgufFile flat = write_and_open(c, "skew0.gguf");
  c.router_skew = 1.5f;
  GgufFile skewed = write_and_open(c, "skew1.gguf");
  for (uint32_t layer = 0; layer < c.n_layer; ++layer) {
    auto f0 = top1_counts(flat, layer, c.n_embd, c.n_expert);
    auto f1 = top1_counts(skewed, layer, c.n_embd, c.n_expert);
    const double uniform = 4000.0 / c.n_expert;
    EXPECT_LT(*std::max_element(f0.begin(), f0.end()), 2.0 * uniform) << "layer " << layer;
    EXPECT_GT(*std::max_element(f1.begin(), f1.end()), 4.0 * uniform) << "layer " << layer;
  }
  // A different permutation per layer: the favourite differs between layers 0 and 1.
  auto l0 = top1_counts(skewed, 0, c.n_embd, c.n_expert);
  auto l1 = top1_counts(skewed, 1, c.n_embd, c.n_expert);
  EXPECT_NE(std::max_element(l0.begin(), l0.end()) - l0.begin(), std::max_element(l1.begin(), l1.end()) - l1.begin());
}

TEST(SynthVocab, CopiesTokenizerFromVocabFile) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.vocab_path = test::testdata("vocab/ggml-vocab-qwen2.gguf");
  c.sparse = true;
  GgufFile f = write_and_open(c, "vocab.gguf");
  auto src = GgufFile::open(c.vocab_path);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(*f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ((*f.get_array("tokenizer.ggml.tokens"))->count, (*src->get_array("tokenizer.ggml.tokens"))->count);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->ne[1], (*src->get_array("tokenizer.ggml.tokens"))->count);
  EXPECT_EQ((*f.get_array("tokenizer.ggml.merges"))->strings[100], (*src->get_array("tokenizer.ggml.merges"))->strings[100]);
}

TEST(SynthVocab, BuiltInVocabHasAllBytesAndPads) {
  SynthConfig c = tiny_for(Arch::kQwen3Moe);
  c.n_vocab = 1000;
  c.sparse = true;
  GgufFile f = write_and_open(c, "builtin.gguf");
  auto tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)->count, 1000u);
  EXPECT_EQ((*tokens)->strings[65], "A");
  EXPECT_EQ((*tokens)->strings[32], "\xC4\xA0");  // GPT-2's space
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
  const uint32_t eos = *f.get_u32("tokenizer.ggml.eos_token_id");
  EXPECT_EQ((*tokens)->strings[eos], "<|endoftext|>");
}

}  // namespace
}  // namespace mt::synth
