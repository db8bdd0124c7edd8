// HParams: a model's hyper-parameters read from its GGUF keys and validated.
//
// Keys follow llama.cpp (../shared/reference/moe_arch_facts.md §1, §3); every count is
// checked for range and consistency so the forward pass can trust them (MT_CHECK there,
// Status here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/reader.h"
#include "model/arch.h"

namespace mt {

struct HParams {
  Arch arch = Arch::kQwen3Moe;
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;        // the main stack: block_count less the NextN layers
  uint32_t n_layer_file = 0;   // block_count (NextN / MTP layers included: bound for --mtp only)
  uint32_t n_nextn = 0;        // nextn_predict_layers
  uint32_t n_dense_lead = 0;   // leading_dense_block_count: layers [0, n) are dense FFNs
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim = 0;       // key_length (= value_length for these archs)
  uint32_t n_rot = 0;          // rotated dims per head (rope.dimension_count)
  uint32_t n_ff = 0;           // dense FFN width (feed_forward_length)
  uint32_t n_ff_exp = 0;       // expert width
  uint32_t n_ff_shexp = 0;     // shared expert width (qwen2moe; n_ff_exp x expert_shared_count)
  uint32_t n_expert = 0;       // 0: dense model
  uint32_t n_expert_used = 0;
  // Routing math (../shared/reference/moe_arch_facts.md §2): scores from the router logits
  // by `gating`, a selection bias where the layer has exp_probs_b, the best n_group_used of
  // n_expert_groups groups (0: no groups), top-k, weights renormalised, then scaled.
  ExpertGating gating = ExpertGating::kSoftmax;
  bool renormalize = false;
  float expert_weights_scale = 1.0f;
  uint32_t n_expert_groups = 0;
  uint32_t n_group_used = 0;
  float rms_eps = 1e-6f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor (linear and YaRN scaling)
  // YaRN (rope.scaling.type yarn), as llama.cpp computes it: per rotated pair k the angle
  // mixes the interpolated (freq_scale x) and extrapolated angle by a ramp over the
  // correction dims from n_ctx_orig and the betas; cos and sin are multiplied by
  // rope_attn_factor x (1 + 0.1 ln(1 / freq_scale)). yarn_ext 0: no YaRN.
  float yarn_ext = 0.0f;
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  uint32_t n_ctx_orig = 0;
  float rope_attn_factor = 1.0f;  // what llama.cpp passes its rope as attn_factor
  float yarn_log_mul = 0.0f;      // deepseek2: rope.scaling.yarn_log_multiplier / 0.1

  // Multi-head latent attention (deepseek2): the cache holds one latent row per position,
  // kv_lora_rank compressed dims then n_rot rope dims (head_dim = their sum, n_head_kv 1);
  // the value is the latent part. Per head: q of mla_k dims (mla_k - n_rot "nope" + n_rot
  // rope), values of mla_v dims after the per-head v_b product.
  // Sliding-window attention (gpt-oss): layers with l % swa_period < swa_period - 1 see only
  // the last n_swa positions (a key is masked when pos_q - pos_k >= n_swa), with their own
  // RoPE base. n_swa 0: every layer full.
  // Laguna: the full layer first in each period (layer l is full iff l % period == 0), and
  // the SWA layers rotate n_rot_swa dims.
  uint32_t n_swa = 0;
  uint32_t swa_period = 0;
  bool swa_dense_first = false;
  float rope_freq_base_swa = 10000.0f;
  uint32_t n_rot_swa = 0;
  bool is_swa(uint32_t layer) const {
    if (n_swa == 0 || swa_period == 0) return false;
    return swa_dense_first ? layer % swa_period != 0 : layer % swa_period < swa_period - 1;
  }
  // Per-layer query-head counts (laguna writes head_count as an array; empty: n_head for
  // every layer, else n_head is their maximum). for_layer() gives one layer's view.
  std::vector<uint32_t> n_head_per_layer;
  HParams for_layer(uint32_t layer) const {
    HParams h = *this;
    if (layer < n_head_per_layer.size()) h.n_head = n_head_per_layer[layer];
    if (is_swa(layer)) {
      h.n_rot = n_rot_swa;
      h.rope_freq_base = rope_freq_base_swa;
      if (swa_dense_first) {  // laguna's SWA layers: plain RoPE, no scaling
        h.rope_freq_scale = 1.0f;
        h.yarn_ext = 0.0f;
        h.rope_attn_factor = 1.0f;
      }
    }
    h.n_head_per_layer.clear();
    return h;
  }

  bool mla = false;
  uint32_t q_lora_rank = 0;    // 0: one attn_q matrix (the "lite" models)
  uint32_t kv_lora_rank = 0;
  uint32_t mla_k = 0, mla_v = 0;

  // Gated DeltaNet (qwen3next / qwen35moe; ../shared/reference/moe_arch_facts_hybrid.md
  // §1.7-1.8): a recurrent layer keeps, per sequence, the last ssm_conv - 1 pre-conv rows of
  // its q|k|v projection (conv_dim() each) and a delta-rule state of ssm_nv heads, each
  // ssm_state x ssm_state floats; it has no KV rows.
  uint32_t ssm_conv = 0;    // ssm.conv_kernel
  uint32_t ssm_state = 0;   // ssm.state_size: key head dim (= value head dim)
  uint32_t ssm_nk = 0;      // ssm.group_count: key heads
  uint32_t ssm_nv = 0;      // ssm.time_step_rank: value heads
  bool ssm_tiled = false;   // value head h reads key head h % nk (qwen35moe), else h / (nv / nk)
  std::vector<uint8_t> recurrent;  // per main-stack layer: 1 for a Gated DeltaNet layer
  bool is_recurrent(uint32_t layer) const { return layer < recurrent.size() && recurrent[layer] != 0; }
  uint32_t ssm_key_dim() const { return ssm_nk * ssm_state; }
  uint32_t ssm_value_dim() const { return ssm_nv * ssm_state; }
  uint32_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  uint64_t conv_state_floats() const { return uint64_t{ssm_conv - 1} * ssm_conv_dim(); }
  uint64_t delta_state_floats() const { return uint64_t{ssm_nv} * ssm_state * ssm_state; }
  uint32_t n_attention_layers() const {
    uint32_t n = 0;
    for (uint32_t l = 0; l < n_layer; ++l) n += is_recurrent(l) ? 0 : 1;
    return n;
  }

  uint32_t q_dim() const { return n_head * (mla ? mla_k : head_dim); }
  uint32_t kv_dim() const { return n_head_kv * head_dim; }
};

// YaRN's per-model constants for n_rot rotated dims (HParams yarn_*; model/attention.cpp
// rope_angles): pairs k <= lo extrapolate, k >= hi interpolate, a ramp between; cos and
// sin are scaled by mscale. Computed in float as ggml computes them.
struct RopeYarn {
  float lo = 0.0f, hi = 0.0f, mscale = 1.0f;
};
RopeYarn rope_yarn(const HParams& hp, uint32_t n_rot);

StatusOr<HParams> read_hparams(const gguf::GgufFile& file);

}  // namespace mt
