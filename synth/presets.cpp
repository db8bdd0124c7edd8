// Presets mirroring real checkpoints' geometry, and parsing of quant mixes.
#include <charconv>

#include "synth/config.h"

namespace mt::synth {
namespace {

SynthConfig base(const std::string& name, Arch arch) {
  SynthConfig c;
  c.name = name;
  c.arch = arch;
  return c;
}

struct Preset {
  const char* name;
  SynthConfig (*make)();
};

const Preset kPresets[] = {
    {"tiny", [] { return tiny_for(Arch::kQwen3Moe); }},
    {"olmoe-1b-7b", [] {
       // OLMoE-1B-7B: 16 layers, 64 experts top-8, width 1024, n_head == n_head_kv.
       SynthConfig c = base("olmoe-1b-7b", Arch::kOlmoe);
       c.n_layer = 16; c.n_embd = 2048; c.n_head = 16; c.n_head_kv = 16; c.head_dim = 128;
       c.n_expert = 64; c.n_expert_used = 8; c.n_ff_exp = 1024; c.n_vocab = 50304;
       c.n_ctx = 4096; c.rope_freq_base = 10000.0f; c.rms_eps = 1e-5f;
       return c;
     }},
    {"qwen1.5-moe-a2.7b", [] {
       // Qwen1.5-MoE-A2.7B: 24 layers, 60 experts top-4, width 1408, shared expert 5632.
       SynthConfig c = base("qwen1.5-moe-a2.7b", Arch::kQwen2Moe);
       c.n_layer = 24; c.n_embd = 2048; c.n_head = 16; c.n_head_kv = 16; c.head_dim = 128;
       c.n_expert = 60; c.n_expert_used = 4; c.n_ff_exp = 1408; c.n_ff_shexp = 5632; c.n_ff = 5632;
       c.n_vocab = 151936; c.n_ctx = 8192; c.rope_freq_base = 1000000.0f;
       return c;
     }},
    {"qwen3-30b-a3b", [] {
       // Qwen3-30B-A3B: 48 layers, 128 experts top-8, width 768, 32/4 heads of 128.
       SynthConfig c = base("qwen3-30b-a3b", Arch::kQwen3Moe);
       c.n_layer = 48; c.n_embd = 2048; c.n_head = 32; c.n_head_kv = 4; c.head_dim = 128;
       c.n_expert = 128; c.n_expert_used = 8; c.n_ff_exp = 768; c.n_ff = 6144;
       c.n_vocab = 151936; c.n_ctx = 40960; c.rope_freq_base = 1000000.0f;
       return c;
     }},
    {"mixtral-8x7b", [] {
       // Mixtral-8x7B: llama with 8 experts top-2, width 14336.
       SynthConfig c = base("mixtral-8x7b", Arch::kLlama);
       c.n_layer = 32; c.n_embd = 4096; c.n_head = 32; c.n_head_kv = 8; c.head_dim = 128;
       c.n_expert = 8; c.n_expert_used = 2; c.n_ff_exp = 14336; c.n_vocab = 32000;
       c.n_ctx = 32768; c.rope_freq_base = 1000000.0f; c.rms_eps = 1e-5f;
       return c;
     }},
    {"laguna-s", [] {
       // Seed 000's Laguna-S Q4_K_M geometry as a real laguna (S.2: 48 blocks, the first a
       // dense FFN, then 47 MoE layers): 256 experts top-10, n_embd 3072, expert width 1024,
       // one shared expert; 39 Q4_K MoE layers (5.0625 MiB per expert) and 8 BF16 layers
       // (18 MiB per expert). Not published, assumed from XS.2: which 8 layers are BF16
       // (every sixth MoE layer here), 24/8 heads of 128 on every layer, full attention on
       // every 4th layer with 64 rotated dims at base 500000 and YaRN 32x, the others a
       // 512-position window rotating all 128 dims at base 10000, the dense width 8192,
       // sigmoid routing with the selection bias, renormalised, scaled by 2.5.
       SynthConfig c = base("laguna-s", Arch::kLaguna);
       c.n_layer = 48; c.n_dense_lead = 1; c.n_embd = 3072; c.n_head = 24; c.n_head_kv = 8; c.head_dim = 128;
       c.n_expert = 256; c.n_expert_used = 10; c.n_ff_exp = 1024; c.n_expert_shared = 1; c.n_ff = 8192;
       c.n_vocab = 100352; c.n_ctx = 131072; c.rope_freq_base = 500000.0f; c.n_rot = 64;
       c.n_swa = 512; c.n_rot_swa = 128; c.rope_freq_base_swa = 10000.0f;
       c.yarn_factor = 32.0f; c.yarn_orig_ctx = 4096;
       c.weights_norm = true; c.weights_scale = 2.5f; c.sigmoid = true; c.selection_bias = true;
       c.quant = *parse_quant_mix("q4_k");
       c.layer_types.push_back({{1, 7, 13, 19, 25, 31, 37, 43}, QuantType::BF16});
       return c;
     }},
    {"laguna-s-geometry", [] {
       // laguna-s's 47 MoE layers of experts (same banks, same BF16 layers) in the qwen3moe
       // layout, without the dense block, windows or the laguna routing: what the CUDA
       // backend and the GPU tiering run until they learn laguna.
       SynthConfig c = base("laguna-s-geometry", Arch::kQwen3Moe);
       c.n_layer = 47; c.n_embd = 3072; c.n_head = 24; c.n_head_kv = 8; c.head_dim = 128;
       c.n_expert = 256; c.n_expert_used = 10; c.n_ff_exp = 1024; c.n_vocab = 100352;
       c.n_ctx = 131072; c.rope_freq_base = 500000.0f;
       c.quant = *parse_quant_mix("q4_k");
       c.layer_types.push_back({{0, 6, 12, 18, 24, 30, 36, 42}, QuantType::BF16});
       return c;
     }},
    {"tiny-deepseek2-v2", [] {
       // DeepSeek-V2-Lite-like routing on the tiny MLA geometry: one attn_q matrix (no q
       // low-rank pair), softmax over all experts, no selection bias, no groups, the top-k
       // weights neither renormalised nor scaled, 2 shared experts.
       SynthConfig c = tiny_for(Arch::kDeepseek2);
       c.name = "tiny-deepseek2-v2";
       c.q_lora_rank = 0; c.n_expert_shared = 2; c.n_expert_groups = 0; c.n_group_used = 0;
       c.weights_norm = false; c.weights_scale = 1.0f; c.sigmoid = false; c.selection_bias = false;
       c.yarn_factor = 0.0f;  // plain RoPE here: the V3-like tiny model covers YaRN
       return c;
     }},
    {"deepseek-v2-lite", [] {
       // DeepSeek-V2-Lite: 27 blocks (1 dense lead), 64 experts top-6 of width 1408, 2 shared,
       // n_embd 2048, 16 heads, MLA (kv_lora_rank 512, rope 64, nope 128, v 128, no q
       // low-rank pair), softmax routing, no renormalisation; vocab 102400; YaRN 40x over 4096
       // with mscale_all_dim 0.707.
       SynthConfig c = base("deepseek-v2-lite", Arch::kDeepseek2);
       c.n_layer = 27; c.n_dense_lead = 1; c.n_embd = 2048; c.n_head = 16; c.n_head_kv = 1;
       c.head_dim = 192; c.n_rot = 64; c.kv_lora_rank = 512; c.q_lora_rank = 0; c.mla_v = 128;
       c.n_expert = 64; c.n_expert_used = 6; c.n_ff_exp = 1408; c.n_expert_shared = 2; c.n_ff = 10944;
       c.n_vocab = 102400; c.n_ctx = 163840; c.rope_freq_base = 10000.0f;
       c.weights_norm = false; c.weights_scale = 1.0f;
       c.yarn_factor = 40.0f; c.yarn_orig_ctx = 4096; c.yarn_mscale_all_dim = 0.707f;
       return c;
     }},
    {"gpt-oss-20b", [] {
       // gpt-oss-20b: 24 layers, 32 experts top-4 of width 2880, n_embd 2880, 64/8 heads of
       // 64, window 128 on the even layers, vocab 201088; MXFP4 experts; YaRN 32x over 4096.
       SynthConfig c = base("gpt-oss-20b", Arch::kGptOss);
       c.n_layer = 24; c.n_embd = 2880; c.n_head = 64; c.n_head_kv = 8; c.head_dim = 64;
       c.n_expert = 32; c.n_expert_used = 4; c.n_ff_exp = 2880; c.n_vocab = 201088;
       c.n_ctx = 131072; c.rope_freq_base = 150000.0f; c.rms_eps = 1e-5f; c.n_swa = 128;
       c.quant = *parse_quant_mix("mxfp4");
       c.yarn_factor = 32.0f; c.yarn_orig_ctx = 4096;
       return c;
     }},
    {"glm-4.5-air", [] {
       // GLM-4.5-Air: 46 blocks (1 dense lead) + 1 NextN, 128 experts top-8 of width 1408,
       // 1 shared expert, n_embd 4096, 96/8 heads of 128 with half rotated, no q/k norms,
       // sigmoid routing renormalised and scaled by 1.0; vocab 151552.
       SynthConfig c = base("glm-4.5-air", Arch::kGlm4Moe);
       c.n_layer = 46; c.n_dense_lead = 1; c.n_nextn = 1; c.n_embd = 4096; c.n_head = 96; c.n_head_kv = 8;
       c.head_dim = 128; c.n_rot = 64; c.qk_norm = false;
       c.n_expert = 128; c.n_expert_used = 8; c.n_ff_exp = 1408; c.n_expert_shared = 1; c.n_ff = 10944;
       c.n_vocab = 151552; c.n_ctx = 131072; c.rope_freq_base = 1000000.0f; c.rms_eps = 1e-5f;
       c.weights_norm = true; c.weights_scale = 1.0f; c.sigmoid = true; c.selection_bias = true;
       return c;
     }},
    {"ornith-35b", [] {
       // Seed 001's Ornith-1.5-35B-A3B Q4_K_M geometry: 40 MoE layers, 256 experts top-8,
       // n_embd 2048, expert width 512, Q4_K gate/up, Q6_K down on the 20 "more bits"
       // layers of the q4_k_m rule and Q4_K down on the other 20; vocab 248320. A real
       // qwen35moe: 30 Gated DeltaNet layers (16 key / 32 value heads of 128, conv 4) and
       // 10 gated full-attention layers (16/2 heads of 256, 64 rotated), a gated shared
       // expert of 512.
       SynthConfig c = base("ornith-35b", Arch::kQwen35Moe);
       c.n_layer = 40; c.n_embd = 2048; c.n_head = 16; c.n_head_kv = 2; c.head_dim = 256; c.n_rot = 64;
       c.n_expert = 256; c.n_expert_used = 8; c.n_ff_exp = 512; c.n_ff_shexp = 512; c.n_vocab = 248320;
       c.ssm_state = 128; c.ssm_nk = 16; c.ssm_nv = 32; c.ssm_conv = 4; c.full_attention_interval = 4;
       c.n_ctx = 262144; c.rope_freq_base = 10000000.0f;
       c.quant = *parse_quant_mix("q4_k_m");
       return c;
     }},
    {"qwen3.6-35b-a3b-mtp", [] {
       // Seed 003's Qwen3.6-35B-A3B-MTP: the ornith-35b geometry plus its one MTP block.
       SynthConfig c = *preset("ornith-35b");
       c.name = "qwen3.6-35b-a3b-mtp";
       c.n_nextn = 1;
       return c;
     }},
    {"qwen3.8-flash-next", [] {
       // A Qwen3.8-Flash-Next-like qwen3next: 48 layers (36 Gated DeltaNet, 12 gated full
       // attention), 512 experts top-10 of width 512, a gated shared expert of 512, n_embd
       // 2048, 16/2 heads of 256 (64 rotated), 16 key / 32 value heads of 128, one MTP block.
       SynthConfig c = base("qwen3.8-flash-next", Arch::kQwen3Next);
       c.n_layer = 48; c.n_nextn = 1; c.n_embd = 2048; c.n_head = 16; c.n_head_kv = 2; c.head_dim = 256; c.n_rot = 64;
       c.n_expert = 512; c.n_expert_used = 10; c.n_ff_exp = 512; c.n_ff_shexp = 512; c.n_vocab = 151936;
       c.ssm_state = 128; c.ssm_nk = 16; c.ssm_nv = 32; c.ssm_conv = 4; c.full_attention_interval = 4;
       c.n_ctx = 262144; c.rope_freq_base = 10000000.0f;
       c.quant = *parse_quant_mix("q4_k_m");
       return c;
     }},
};

StatusOr<uint32_t> parse_u32(std::string_view s, const std::string& what) {
  uint32_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return invalid_argument(what + ": '" + std::string(s) + "' is not a non-negative integer");
  }
  return v;
}

}  // namespace

SynthConfig tiny_for(Arch arch) {
  SynthConfig c = base("tiny", arch);
  c.name = std::string("tiny-") + std::string(arch_info(arch).name);
  if (arch == Arch::kOlmoe) c.n_head_kv = c.n_head;  // llama.cpp requires it for olmoe
  if (arch == Arch::kQwen2Moe) c.n_ff_shexp = 512;
  if (arch == Arch::kGlm4Moe) {
    // One leading dense block, two MoE blocks, one NextN block; half the head rotated;
    // 8 experts in 4 groups of which the best 2 compete (the generic group keys), weights
    // renormalised and scaled by 2.5 as DeepSeek-V3 / GLM do.
    c.n_layer = 3; c.n_dense_lead = 1; c.n_nextn = 1; c.n_rot = c.head_dim / 2;
    c.n_expert_shared = 1; c.n_ff = 512;
    c.n_expert_groups = 4; c.n_group_used = 2;
    c.weights_norm = true; c.weights_scale = 2.5f;
    c.sigmoid = true; c.selection_bias = true;
  }
  if (arch == Arch::kLaguna) {
    // XS.2-like: one leading dense block, then MoE; layer 0 (and every 4th) full attention
    // with 4 heads rotating 32 dims at base 500000, the others a 16-position window with 8
    // heads rotating all 64 dims at base 10000; per-head softplus gate; sigmoid routing
    // with the selection bias, renormalised, scaled by 2.5; one shared expert.
    c.n_layer = 4; c.n_dense_lead = 1; c.n_ff = 512; c.n_expert_shared = 1;
    c.n_swa = 16; c.n_head_swa = 8; c.n_rot = 32; c.n_rot_swa = 64;
    c.rope_freq_base = 500000.0f; c.rope_freq_base_swa = 10000.0f;
    c.weights_norm = true; c.weights_scale = 2.5f; c.sigmoid = true; c.selection_bias = true;
    c.yarn_factor = 32.0f;  // full layers only (XS.2: factor 32 over 4096)
  }
  if (arch == Arch::kGptOss) {
    // Even layers slide a 16-position window (crossed by the 64-token tests) with their own
    // RoPE base; the experts are MXFP4 in the real files (--quant mxfp4).
    c.n_layer = 2; c.n_swa = 16; c.rope_freq_base_swa = 5000.0f;
    c.yarn_factor = 32.0f;  // gpt-oss: YaRN factor 32 over 4096 on every layer
  }
  if (arch == Arch::kQwen3Next || arch == Arch::kQwen35Moe) {
    // Three Gated DeltaNet layers then one gated full-attention layer (4 heads of 64, a
    // quarter rotated), 2 key heads and 4 value heads of 64 (qwen3next groups value heads
    // by key head, qwen35moe tiles them), conv 4, a gated shared expert of 256; qwen35moe
    // with one MTP block after the stack (--mtp's drafter).
    c.n_layer = 4; c.n_rot = 16; c.n_ff_shexp = 256;
    c.ssm_state = 64; c.ssm_nk = 2; c.ssm_nv = 4; c.ssm_conv = 4; c.full_attention_interval = 4;
    if (arch == Arch::kQwen35Moe) c.n_nextn = 1;
  }
  if (arch == Arch::kDeepseek2) {
    // DeepSeek-V3-like: MLA with a q low-rank pair, one leading dense block, sigmoid routing
    // with the selection bias over 4 groups of which 2 are used, renormalised, scaled by 2.5.
    c.n_layer = 3; c.n_dense_lead = 1; c.n_ff = 512; c.n_expert_shared = 1;
    c.head_dim = 64; c.n_rot = 32; c.kv_lora_rank = 128; c.q_lora_rank = 64; c.mla_v = 32; c.n_head_kv = 1;
    c.n_expert_groups = 4; c.n_group_used = 2;
    c.weights_norm = true; c.weights_scale = 2.5f;
    c.sigmoid = true; c.selection_bias = true;
    c.yarn_factor = 40.0f; c.yarn_mscale_all_dim = 0.707f;  // V2/V3: YaRN 40x with the log multiplier
  }
  return c;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

StatusOr<SynthConfig> preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
  }
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  return invalid_argument("unknown preset '" + name + "' (known: " + known + ")");
}

StatusOr<QuantMix> parse_quant_mix(const std::string& name) {
  QuantMix mix;
  mix.name = name;
  if (name == "q4_k_m" || name == "Q4_K_M") {
    mix.base = QuantType::Q4_K;
    mix.more_bits = QuantType::Q6_K;
    mix.output = QuantType::Q6_K;
    return mix;
  }
  if (name == "q5_k_m" || name == "Q5_K_M") {
    mix.base = QuantType::Q5_K;
    mix.more_bits = QuantType::Q6_K;
    mix.output = QuantType::Q6_K;
    return mix;
  }
  auto t = type_from_name(name);
  if (!t) return invalid_argument("unknown quant type or mix '" + name + "' (e.g. q8_0, q4_k, bf16, q4_k_m)");
  if (!type_traits(*t).has_reference || *t == QuantType::Q8_1 || *t == QuantType::Q8_K) {
    return unimplemented("synth cannot write weights of type " + std::string(type_name(*t)));
  }
  mix.base = *t;
  return mix;
}

StatusOr<LayerTypeOverride> parse_layer_override(const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return invalid_argument("layer type override '" + spec + "' must look like '0-3,8=bf16'");
  }
  LayerTypeOverride o;
  auto t = type_from_name(spec.substr(eq + 1));
  if (!t) return invalid_argument("layer type override '" + spec + "': unknown type '" + spec.substr(eq + 1) + "'");
  o.type = *t;
  std::string_view list(spec.data(), eq);
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    size_t dash = item.find('-');
    MT_ASSIGN_OR_RETURN(uint32_t first, parse_u32(item.substr(0, dash), "layer in '" + spec + "'"));
    uint32_t last = first;
    if (dash != std::string_view::npos) {
      MT_ASSIGN_OR_RETURN(last, parse_u32(item.substr(dash + 1), "layer in '" + spec + "'"));
    }
    if (last < first || last - first > 100000) return invalid_argument("bad layer range in '" + spec + "'");
    for (uint32_t l = first; l <= last; ++l) o.layers.push_back(l);
  }
  if (o.layers.empty()) return invalid_argument("layer type override '" + spec + "' names no layer");
  return o;
}

Status validate(const SynthConfig& c) {
  const ArchInfo& a = arch_info(c.arch);
  auto fail = [&](const std::string& m) { return invalid_argument("synth '" + c.name + "': " + m); };
  if (c.n_layer == 0 || c.n_layer > 1024) return fail("layers must be 1..1024");
  if (c.n_embd == 0 || c.n_head == 0 || c.head_dim == 0 || c.n_head_kv == 0) return fail("dims must be positive");
  if (c.n_head % c.n_head_kv != 0) return fail("head_count must be a multiple of head_count_kv");
  if (c.n_expert < 2 || c.n_expert > 1024) return fail("experts must be 2..1024 (llama.cpp's limit)");
  if (c.n_expert_used == 0 || c.n_expert_used > c.n_expert) return fail("experts used must be 1..experts");
  if (c.n_ff_exp == 0) return fail("expert width must be positive");
  if (c.arch == Arch::kOlmoe && c.n_head_kv != c.n_head) return fail("olmoe needs head_count_kv == head_count");
  if (c.arch == Arch::kLlama && c.head_dim * c.n_head != c.n_embd) {
    return fail("llama needs head_dim * head_count == n_embd");
  }
  if (a.shared_expert == SharedExpert::kGated && c.n_ff_shexp == 0) return fail(std::string(a.name) + " needs a shared expert width");
  if (a.shared_expert != SharedExpert::kGated && c.n_ff_shexp != 0) return fail(std::string(a.name) + " has no gated shared expert");
  if (a.shared_expert != SharedExpert::kUngated && c.n_expert_shared != 0) return fail(std::string(a.name) + " has no shared experts");
  if (!a.routing_keys && c.n_dense_lead != 0) return fail(std::string(a.name) + " has no dense lead blocks");
  if (!a.routing_keys && !a.linear_attention && c.n_nextn != 0) return fail(std::string(a.name) + " has no NextN blocks");
  if (a.linear_attention && (c.ssm_state == 0 || c.ssm_state % 2 != 0 || c.ssm_nk == 0 || c.ssm_nv % c.ssm_nk != 0 ||
                             c.ssm_nv == 0 || c.ssm_conv < 2 || c.full_attention_interval < 2)) {
    return fail(std::string(a.name) + " needs Gated DeltaNet dims (state, key heads dividing value heads, conv >= 2) and an attention interval >= 2");
  }
  if (c.n_dense_lead >= c.n_layer) return fail("leading dense blocks must leave at least one MoE block");
  if (c.n_dense_lead > 0 && c.n_ff == 0) return fail("leading dense blocks need a width (n_ff)");
  if (c.arch == Arch::kDeepseek2 && (c.kv_lora_rank == 0 || c.mla_v == 0 || c.n_rot == 0 || c.n_rot >= c.head_dim)) {
    return fail("deepseek2 needs kv_lora_rank, value dims and rope dims below head_dim");
  }
  if (c.arch != Arch::kDeepseek2 && (c.kv_lora_rank != 0 || c.q_lora_rank != 0 || c.mla_v != 0)) {
    return fail(std::string(a.name) + " has no latent attention");
  }
  if (c.arch == Arch::kGlm4Moe && !(c.sigmoid && c.selection_bias)) return fail("glm4moe routes by sigmoid with exp_probs_b");
  if (!a.routing_keys && (c.sigmoid || c.selection_bias)) return fail(std::string(a.name) + " routes by softmax without a bias");
  if (a.oai && c.n_swa == 0) return fail("gpt-oss needs a sliding window");
  if (!a.oai && c.arch != Arch::kLaguna && c.n_swa != 0) return fail(std::string(a.name) + " has no sliding-window layers");
  if (c.n_head_swa != 0 && (c.arch != Arch::kLaguna || c.n_head_swa % c.n_head_kv != 0)) {
    return fail("per-layer head counts are laguna's, and must be multiples of head_count_kv");
  }
  if (!(c.yarn_factor == 0.0f || (c.yarn_factor >= 1.0f && c.yarn_factor <= 1024.0f)) || c.yarn_orig_ctx == 0) {
    return fail("YaRN factor must be 1..1024 (0: none) over a positive original context");
  }
  if (!(c.weights_scale > 0.0f && c.weights_scale <= 64.0f)) return fail("expert weights scale must be in (0, 64]");
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) return fail("rope dims must be even and <= head_dim");
  if (c.n_expert_groups > 1 && (c.n_expert % c.n_expert_groups != 0 || c.n_expert / c.n_expert_groups < 2 ||
                                c.n_group_used == 0 || c.n_group_used >= c.n_expert_groups ||
                                c.n_group_used * (c.n_expert / c.n_expert_groups) < c.n_expert_used)) {
    return fail("expert groups must divide the experts into groups of 2+, and the used groups hold top-k");
  }
  if (c.tie_output && !a.output_may_be_tied) return fail(std::string(a.name) + " requires output.weight (no tying)");
  if (c.router_skew < 0.0f || c.router_skew > 8.0f) return fail("router skew must be 0..8");
  for (const LayerTypeOverride& o : c.layer_types) {
    for (uint32_t l : o.layers) {
      if (l >= c.n_layer) return fail("layer type override names layer " + std::to_string(l) + " of " + std::to_string(c.n_layer));
    }
  }
  return {};
}

}  // namespace mt::synth
