// SynthConfig: everything that defines a synthetic MoE GGUF, and the named presets that
// mirror real checkpoints' geometry (dims in the units GGUF stores them).
//
// A synthetic model is a real architecture with made-up weights: the same keys, tensor
// names, shapes and quant types as a converted checkpoint, so loaders, planners and
// kernels see exactly what they would see on the real file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/arch.h"
#include "quant/types.h"

namespace mt::synth {

// How tensor types are chosen: one type for every matrix, or a llama.cpp-like mix.
struct QuantMix {
  std::string name = "q8_0";        // "q8_0", "bf16", "q4_k_m", ...
  QuantType base = QuantType::Q8_0; // matrices not named below
  std::optional<QuantType> more_bits;  // ffn_down* and attn_v on the "more bits" layers
  std::optional<QuantType> output;     // output.weight
};
// Parses a type name ("q4_k", "bf16") or a mix name ("q4_k_m", "q5_k_m").
StatusOr<QuantMix> parse_quant_mix(const std::string& name);

// Expert tensors of the listed layers get `type` instead of the mix's choice
// (e.g. Laguna-S's BF16 layers).
struct LayerTypeOverride {
  std::vector<uint32_t> layers;
  QuantType type;
};
// Parses "0-3,8=bf16".
StatusOr<LayerTypeOverride> parse_layer_override(const std::string& spec);

struct SynthConfig {
  std::string name = "tiny";
  Arch arch = Arch::kQwen3Moe;
  uint32_t n_layer = 2;
  uint32_t n_embd = 256;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t head_dim = 64;
  uint32_t n_expert = 8;
  uint32_t n_expert_used = 2;
  uint32_t n_ff_exp = 256;      // expert width
  uint32_t n_ff_shexp = 0;      // shared expert width (qwen2moe)
  uint32_t n_rot = 0;           // rope.dimension_count (0: head_dim)
  float yarn_factor = 0.0f;     // YaRN rope scaling by this factor (0: none)
  uint32_t yarn_orig_ctx = 4096;  // rope.scaling.original_context_length
  float yarn_mscale_all_dim = 0.0f;  // deepseek2: written as yarn_log_multiplier = 0.1 x this
  // glm4moe / deepseek2 style (ArchInfo::routing_keys)
  uint32_t n_expert_shared = 0; // ungated shared experts of width n_ff_exp
  uint32_t n_dense_lead = 0;    // leading dense FFN blocks (width n_ff)
  uint32_t n_nextn = 0;         // NextN (MTP) blocks appended after the main stack
  bool qk_norm = true;          // per-head q/k norms where the arch makes them optional
  bool weights_norm = true;     // expert_weights_norm
  float weights_scale = 1.0f;   // expert_weights_scale
  uint32_t n_expert_groups = 0; // expert_group_count (0: no group-limited routing)
  uint32_t n_group_used = 0;
  bool sigmoid = false;         // expert_gating_func 2 (glm4moe always; deepseek2 V3-like)
  bool selection_bias = false;  // exp_probs_b (glm4moe always; deepseek2 V3-like)
  // MLA (deepseek2): head_dim is key_length_mla (nope + rope dims), n_rot the rope dims.
  uint32_t q_lora_rank = 0;     // 0: one attn_q matrix
  uint32_t kv_lora_rank = 0;
  uint32_t mla_v = 0;           // value_length_mla
  uint32_t n_swa = 0;           // gpt-oss: the even layers' window; laguna: 3 of every 4 layers
  uint32_t n_head_swa = 0;      // laguna: query heads of the sliding-window layers (0: n_head)
  uint32_t n_rot_swa = 0;       // laguna: their rotated dims (0: n_rot)
  bool gate_per_head = true;    // laguna: attn_gate one scalar per head (else per element)
  float rope_freq_base_swa = 0.0f;  // gpt-oss: their RoPE base (0: rope_freq_base)
  // qwen3next / qwen35moe: every full_attention_interval-th layer gated full attention, the
  // others Gated DeltaNet with ssm_nk key heads and ssm_nv value heads of ssm_state dims.
  uint32_t full_attention_interval = 4;
  uint32_t ssm_conv = 4, ssm_state = 0, ssm_nk = 0, ssm_nv = 0;
  uint32_t n_ff = 0;            // feed_forward_length key (0: = n_ff_exp)
  uint32_t n_vocab = 0;         // 0: the vocabulary's own size; larger pads it
  uint32_t n_ctx = 4096;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;
  bool tie_output = false;      // omit output.weight (archs that allow it)
  QuantMix quant;
  std::vector<LayerTypeOverride> layer_types;
  std::string vocab_path;       // vocab GGUF to copy tokenizer.* from; empty = built-in
  float router_skew = 0.0f;     // 0 = uniform popularity; s = Zipf-like with exponent ~s
  uint64_t seed = 1;
  bool fast = false;            // random valid quantized blocks instead of quantized weights
  bool sparse = false;          // header only, data section a hole
};

// Names of the presets, and the config of one ("tiny", "qwen3-30b-a3b", ...).
std::vector<std::string> preset_names();
StatusOr<SynthConfig> preset(const std::string& name);
// The default preset for an architecture when only --arch is given.
SynthConfig tiny_for(Arch arch);

// Checks the config makes a loadable model (heads divide, top-k <= experts, ...).
Status validate(const SynthConfig& config);

}  // namespace mt::synth
