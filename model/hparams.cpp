#include "model/hparams.h"

#include <algorithm>
#include <cmath>

namespace mt {

namespace {

// The Gated DeltaNet keys, which layers are recurrent, and qwen35moe's IMROPE sections
// (../shared/reference/moe_arch_facts_hybrid.md §1.1, §1.2, §1.6).
Status read_linear_attention(const gguf::GgufFile& f, const std::string& p, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  MT_ASSIGN_OR_RETURN(h.ssm_conv, f.get_u32(p + "ssm.conv_kernel"));
  MT_ASSIGN_OR_RETURN(uint32_t inner, f.get_u32(p + "ssm.inner_size"));
  MT_ASSIGN_OR_RETURN(h.ssm_state, f.get_u32(p + "ssm.state_size"));
  MT_ASSIGN_OR_RETURN(h.ssm_nv, f.get_u32(p + "ssm.time_step_rank"));
  MT_ASSIGN_OR_RETURN(h.ssm_nk, f.get_u32(p + "ssm.group_count"));
  if (h.ssm_conv < 2 || h.ssm_conv > 64) return bad("ssm.conv_kernel " + std::to_string(h.ssm_conv) + " must be 2..64");
  if (h.ssm_state == 0 || h.ssm_state > 1024) return bad("ssm.state_size " + std::to_string(h.ssm_state) + " must be 1..1024");
  if (h.ssm_nk == 0 || h.ssm_nv == 0 || h.ssm_nv > 4096 || h.ssm_nv % h.ssm_nk != 0) {
    return bad("ssm.time_step_rank " + std::to_string(h.ssm_nv) + " must be a positive multiple of ssm.group_count " +
               std::to_string(h.ssm_nk));
  }
  if (inner != h.ssm_nv * h.ssm_state) {
    return unimplemented("ssm.inner_size " + std::to_string(inner) + " != time_step_rank x state_size (" +
                         std::to_string(h.ssm_nv * h.ssm_state) + "): value heads wider than key heads are not supported");
  }
  h.ssm_tiled = h.arch == Arch::kQwen35Moe;
  h.recurrent.assign(h.n_layer, 0);
  if (const gguf::Value* v = f.find(p + "attention.recurrent_layers"); v != nullptr) {
    if (const gguf::Array* arr = v->array(); arr != nullptr) {
      const bool ok = (gguf::is_integer(arr->elem_type) || arr->elem_type == gguf::ValueType::kBool) && arr->count == h.n_layer_file;
      if (!ok) return bad("attention.recurrent_layers must hold one bool or integer per block");
      for (uint32_t l = 0; l < h.n_layer; ++l) {
        h.recurrent[l] = arr->elem_type == gguf::ValueType::kBool ? arr->raw[l] != 0 : arr->int_at(l) != 0;
      }
    } else {
      bool all = false;
      if (v->type == gguf::ValueType::kBool) {
        MT_ASSIGN_OR_RETURN(all, f.get_bool(p + "attention.recurrent_layers"));
      } else {
        MT_ASSIGN_OR_RETURN(uint32_t n, f.get_u32(p + "attention.recurrent_layers"));
        all = n != 0;
      }
      h.recurrent.assign(h.n_layer, all ? 1 : 0);
    }
  } else {
    MT_ASSIGN_OR_RETURN(uint32_t interval, f.get_u32_or(p + "full_attention_interval", 4));
    if (interval == 0) return bad("full_attention_interval must be positive");
    for (uint32_t l = 0; l < h.n_layer; ++l) h.recurrent[l] = (l + 1) % interval != 0 ? 1 : 0;
  }
  if (h.arch == Arch::kQwen35Moe) {
    // IMROPE: pair k takes the t / h / w position by k % 3 within the sections (all the
    // token's position for text) or the unused 4th stream (position 0). Only the former
    // is plain NEOX RoPE; a file that sends rotated pairs to the 4th stream is refused.
    const gguf::Value* v = f.find(p + "rope.dimension_sections");
    if (v == nullptr) return bad("rope.dimension_sections is missing");
    int64_t sec[4] = {0, 0, 0, 0};
    if (const gguf::Array* arr = v->array(); arr != nullptr) {
      if (!gguf::is_integer(arr->elem_type) || arr->count < 3 || arr->count > 4) return bad("rope.dimension_sections must be 3-4 integers");
      for (uint64_t i = 0; i < arr->count; ++i) sec[i] = arr->int_at(i);
    } else {
      MT_ASSIGN_OR_RETURN(uint32_t s0, f.get_u32(p + "rope.dimension_sections"));
      for (int64_t& s : sec) s = s0;
    }
    const int64_t total = sec[0] + sec[1] + sec[2] + sec[3];
    if (sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[3] < 0 || total <= 0) return bad("rope.dimension_sections must be non-negative, not all 0");
    for (int64_t k = 0; k < h.n_rot / 2; ++k) {
      const int64_t s = k % total;
      const bool text = (s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]);
      if (!text) {
        return unimplemented("rope.dimension_sections [" + std::to_string(sec[0]) + ", " + std::to_string(sec[1]) + ", " +
                             std::to_string(sec[2]) + ", " + std::to_string(sec[3]) + "] rotate pair " + std::to_string(k) +
                             " by the 4th position stream: not supported");
      }
    }
  }
  return {};
}

// attention.head_count: one count, or one per block (laguna); n_head is the largest.
Status read_head_counts(const gguf::GgufFile& f, const std::string& p, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  if (const gguf::Value* heads = f.find(p + "attention.head_count"); heads != nullptr && heads->array() != nullptr) {
    const gguf::Array& arr = *heads->array();
    if (!gguf::is_integer(arr.elem_type) || arr.count != h.n_layer) {
      return bad("attention.head_count array must hold one integer per block (" + std::to_string(arr.count) + " for " + std::to_string(h.n_layer) + ")");
    }
    for (uint64_t i = 0; i < arr.count; ++i) {
      const int64_t v = arr.int_at(i);
      if (v <= 0 || v > 4096) return bad("attention.head_count[" + std::to_string(i) + "] out of range");
      h.n_head_per_layer.push_back(static_cast<uint32_t>(v));
      h.n_head = std::max(h.n_head, static_cast<uint32_t>(v));
    }
  } else {
    MT_ASSIGN_OR_RETURN(h.n_head, f.get_u32(p + "attention.head_count"));
  }
  return {};
}

// The sliding-window layers: laguna's (dense first in each period, their own RoPE dims and
// base) and gpt-oss's.
Status read_sliding_window(const gguf::GgufFile& f, const std::string& p, const ArchInfo& info, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  if (h.arch == Arch::kLaguna) {
    MT_ASSIGN_OR_RETURN(h.n_swa, f.get_u32_or(p + "attention.sliding_window", 0));
    if (h.n_swa > 0) {
      h.swa_dense_first = true;
      MT_ASSIGN_OR_RETURN(h.swa_period, f.get_u32_or(p + "attention.sliding_window_pattern", 4));
      if (h.swa_period == 0) return bad("attention.sliding_window_pattern must be positive");
      MT_ASSIGN_OR_RETURN(h.rope_freq_base_swa, f.get_f32_or(p + "rope.freq_base_swa", h.rope_freq_base));
      MT_ASSIGN_OR_RETURN(h.n_rot_swa, f.get_u32_or(p + "rope.dimension_count_swa", h.n_rot));
      if (h.n_rot_swa == 0 || h.n_rot_swa > h.head_dim || h.n_rot_swa % 2 != 0 || !(h.rope_freq_base_swa > 0.0f)) {
        return bad("rope.dimension_count_swa / freq_base_swa out of range");
      }
    }
  }
  if (info.oai) {
    if (h.n_rot != h.head_dim) return bad("gpt-oss needs rope.dimension_count == key_length (its head dim)");
    MT_ASSIGN_OR_RETURN(h.n_swa, f.get_u32(p + "attention.sliding_window"));
    MT_ASSIGN_OR_RETURN(h.swa_period, f.get_u32_or(p + "attention.sliding_window_pattern", 2));
    if (h.n_swa == 0 || h.swa_period == 0) return bad("attention.sliding_window and its pattern must be positive");
    MT_ASSIGN_OR_RETURN(h.rope_freq_base_swa, f.get_f32_or(p + "rope.freq_base_swa", h.rope_freq_base));
    if (!(h.rope_freq_base_swa > 0.0f)) return bad("rope.freq_base_swa must be positive");
  }
  return {};
}

// deepseek2: the MLA layout's keys (the legacy attn_kv_b layout refused by name); other
// architectures need value_length == key_length.
Status read_mla(const gguf::GgufFile& f, const std::string& p, uint32_t value_dim, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  if (h.arch == Arch::kDeepseek2) {
    if (!f.find(p + "attention.key_length_mla") || !f.find(p + "attention.value_length_mla")) {
      return unimplemented("deepseek2 without attention.key_length_mla / value_length_mla (the legacy attn_kv_b layout) "
                           "is not supported: convert the model again with a current llama.cpp converter");
    }
    h.mla = true;
    MT_ASSIGN_OR_RETURN(h.mla_k, f.get_u32(p + "attention.key_length_mla"));
    MT_ASSIGN_OR_RETURN(h.mla_v, f.get_u32(p + "attention.value_length_mla"));
    MT_ASSIGN_OR_RETURN(h.kv_lora_rank, f.get_u32(p + "attention.kv_lora_rank"));
    MT_ASSIGN_OR_RETURN(h.q_lora_rank, f.get_u32_or(p + "attention.q_lora_rank", 0));
    if (h.n_head_kv != 1) return bad("MLA needs head_count_kv 1 (one latent row per position), not " + std::to_string(h.n_head_kv));
    if (h.kv_lora_rank == 0 || h.kv_lora_rank > 8192 || h.head_dim != h.kv_lora_rank + h.n_rot || value_dim != h.kv_lora_rank) {
      return bad("MLA needs key_length = kv_lora_rank + rope.dimension_count and value_length = kv_lora_rank (got " +
                 std::to_string(h.head_dim) + ", " + std::to_string(value_dim) + ", kv_lora_rank " + std::to_string(h.kv_lora_rank) + ")");
    }
    if (h.mla_k <= h.n_rot || h.mla_k > 1024 || h.mla_v == 0 || h.mla_v > 1024 || h.q_lora_rank > 65536) {
      return bad("key_length_mla " + std::to_string(h.mla_k) + " must exceed rope.dimension_count " + std::to_string(h.n_rot) +
                 ", value_length_mla " + std::to_string(h.mla_v) + " must be 1..1024");
    }
  } else if (value_dim != h.head_dim) {
    return bad("value_length " + std::to_string(value_dim) + " differs from key_length (unsupported)");
  }
  return {};
}

// RoPE scaling none / linear / YaRN: the frequency scale, the original context, and the
// attention factor llama.cpp passes its rope (deepseek2's yarn_log_multiplier included).
Status read_rope_scaling(const gguf::GgufFile& f, const std::string& p, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  std::string_view scaling = "linear";  // llama.cpp's default when the key is absent
  if (f.find(p + "rope.scaling.type")) {
    MT_ASSIGN_OR_RETURN(scaling, f.get_string(p + "rope.scaling.type"));
    if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
      return unimplemented("rope scaling '" + std::string(scaling) + "' is not supported yet (none, linear, yarn)");
    }
  }
  float factor = 0.0f;
  if (f.find(p + "rope.scaling.factor")) {
    MT_ASSIGN_OR_RETURN(factor, f.get_f32(p + "rope.scaling.factor"));
  }
  if (!std::isfinite(factor) || factor < 0.0f) return bad("rope.scaling.factor must be finite and >= 0");
  h.rope_freq_scale = factor > 0.0f && scaling != "none" ? 1.0f / factor : 1.0f;
  MT_ASSIGN_OR_RETURN(h.n_ctx_orig, f.get_u32_or(p + "rope.scaling.original_context_length", h.n_ctx_train));
  MT_ASSIGN_OR_RETURN(float attn_factor_key, f.get_f32_or(p + "rope.scaling.attn_factor", 1.0f));
  if (h.arch == Arch::kDeepseek2 && f.find(p + "rope.scaling.yarn_log_multiplier")) {
    MT_ASSIGN_OR_RETURN(h.yarn_log_mul, f.get_f32(p + "rope.scaling.yarn_log_multiplier"));
    h.yarn_log_mul /= 0.1f;  // the converter stores 0.1 x mscale_all_dim
  }
  h.rope_attn_factor = 1.0f;
  if (scaling == "yarn") {
    if (h.n_ctx_orig == 0) return bad("YaRN needs rope.scaling.original_context_length");
    h.yarn_ext = 1.0f;
    const float s = 1.0f / h.rope_freq_scale;
    auto get_mscale = [](float sc, float m) { return sc <= 1.0f ? 1.0f : 0.1f * m * std::log(sc) + 1.0f; };
    if (h.yarn_log_mul != 0.0f) {
      const float m = h.arch == Arch::kDeepseek2 && h.yarn_log_mul != 1.0f ? h.yarn_log_mul : 1.0f;
      h.rope_attn_factor = get_mscale(s, m) / get_mscale(s, h.yarn_log_mul);
    } else {
      h.rope_attn_factor = get_mscale(s, 1.0f);
    }
    h.rope_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(s));  // the rope multiplies it back
  }
  h.rope_attn_factor *= attn_factor_key;
  return {};
}

// The expert counts and widths, the shared expert's width, the routing math's keys and
// group-limited routing.
Status read_experts(const gguf::GgufFile& f, const std::string& p, const ArchInfo& info, HParams& h) {
  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_info(h.arch).name) + " hyper-parameters: " + m); };
  if (h.n_expert > 0) {
    if (h.n_expert > 1024) return bad("expert_count " + std::to_string(h.n_expert) + " exceeds 1024");
    if (h.n_expert_used == 0 || h.n_expert_used > h.n_expert) {
      return bad("expert_used_count " + std::to_string(h.n_expert_used) + " must be 1.." + std::to_string(h.n_expert));
    }
    const gguf::Value* ff_arr = f.find(p + "expert_feed_forward_length");
    if (info.expert_ff_key && ff_arr != nullptr && ff_arr->array() != nullptr) {
      // One width per block: layer 0's sets every MoE layer's shapes (as llama.cpp).
      const gguf::Array& arr = *ff_arr->array();
      if (!gguf::is_integer(arr.elem_type) || arr.count != h.n_layer_file || arr.int_at(0) <= 0 || arr.int_at(0) > (1 << 20)) {
        return bad("expert_feed_forward_length array must hold one positive integer per block");
      }
      h.n_ff_exp = static_cast<uint32_t>(arr.int_at(0));
    } else if (info.expert_ff_key) {
      MT_ASSIGN_OR_RETURN(h.n_ff_exp, f.get_u32_or(p + "expert_feed_forward_length", h.n_ff / h.n_expert_used));
    } else {
      h.n_ff_exp = h.n_ff;
    }
    if (h.n_ff_exp == 0) return bad("expert width is 0");
    if (info.shared_expert == SharedExpert::kGated) {
      MT_ASSIGN_OR_RETURN(h.n_ff_shexp, f.get_u32_or(p + "expert_shared_feed_forward_length", h.n_ff));
    } else if (info.shared_expert == SharedExpert::kUngated && h.arch == Arch::kLaguna) {
      // One shared expert unless the file says otherwise; its own width key.
      MT_ASSIGN_OR_RETURN(uint32_t n_shared, f.get_u32_or(p + "expert_shared_count", 1));
      if (n_shared > 64) return bad("expert_shared_count " + std::to_string(n_shared) + " out of range");
      MT_ASSIGN_OR_RETURN(h.n_ff_shexp, f.get_u32_or(p + "expert_shared_feed_forward_length", h.n_ff_exp * n_shared));
    } else if (info.shared_expert == SharedExpert::kUngated) {
      MT_ASSIGN_OR_RETURN(uint32_t n_shared, f.get_u32(p + "expert_shared_count"));
      if (n_shared > 64) return bad("expert_shared_count " + std::to_string(n_shared) + " out of range");
      h.n_ff_shexp = h.n_ff_exp * n_shared;
    }
    h.gating = info.gating;
    h.renormalize = info.renormalize_topk;
    if (info.routing_keys) {
      MT_ASSIGN_OR_RETURN(uint32_t func, f.get_u32_or(p + "expert_gating_func", 0));
      if (func == 1) h.gating = ExpertGating::kSoftmax;
      else if (func == 2) h.gating = ExpertGating::kSigmoid;
      else if (func != 0) return unimplemented(std::string(arch_info(h.arch).name) + ": expert_gating_func " + std::to_string(func) + " is not supported (1 softmax, 2 sigmoid)");
      MT_ASSIGN_OR_RETURN(h.renormalize, f.get_bool_or(p + "expert_weights_norm", false));
      MT_ASSIGN_OR_RETURN(float scale, f.get_f32_or(p + "expert_weights_scale", 0.0f));
      if (!std::isfinite(scale) || scale < 0.0f) return bad("expert_weights_scale must be finite and >= 0");
      h.expert_weights_scale = scale == 0.0f ? 1.0f : scale;
    }
    // Group-limited routing (read for every architecture, as llama.cpp does).
    MT_ASSIGN_OR_RETURN(h.n_expert_groups, f.get_u32_or(p + "expert_group_count", 0));
    MT_ASSIGN_OR_RETURN(h.n_group_used, f.get_u32_or(p + "expert_group_used_count", 0));
    if (h.n_expert_groups > 1) {
      if (h.n_expert_groups >= h.n_expert || h.n_expert % h.n_expert_groups != 0 || h.n_expert / h.n_expert_groups < 2) {
        return bad("expert_group_count " + std::to_string(h.n_expert_groups) + " must divide expert_count " +
                   std::to_string(h.n_expert) + " into groups of 2 or more");
      }
      if (h.n_group_used == 0 || h.n_group_used >= h.n_expert_groups ||
          h.n_group_used * (h.n_expert / h.n_expert_groups) < h.n_expert_used) {
        return bad("expert_group_used_count " + std::to_string(h.n_group_used) + " must be 1.." +
                   std::to_string(h.n_expert_groups - 1) + " and leave at least expert_used_count experts");
      }
    } else {
      h.n_expert_groups = 0;
      h.n_group_used = 0;
    }
  } else if (h.n_expert_used != 0) {
    return bad("expert_used_count without experts");
  }
  return {};
}

}  // namespace

StatusOr<HParams> read_hparams(const gguf::GgufFile& f) {
  MT_ASSIGN_OR_RETURN(std::string_view arch_name, f.get_string("general.architecture"));
  auto arch = arch_from_name(arch_name);
  if (!arch) {
    std::string known;
    for (const ArchInfo& a : all_archs()) known += std::string(known.empty() ? "" : ", ") + std::string(a.name);
    return unimplemented("architecture '" + std::string(arch_name) + "' is not supported (supported: " + known + ")");
  }
  const ArchInfo& info = arch_info(*arch);
  const std::string p = std::string(arch_name) + ".";
  HParams h;
  h.arch = *arch;
  MT_ASSIGN_OR_RETURN(h.n_embd, f.get_u32(p + "embedding_length"));
  MT_ASSIGN_OR_RETURN(h.n_layer, f.get_u32(p + "block_count"));
  MT_RETURN_IF_ERROR(read_head_counts(f, p, h));
  MT_ASSIGN_OR_RETURN(h.n_head_kv, f.get_u32_or(p + "attention.head_count_kv", h.n_head));
  MT_ASSIGN_OR_RETURN(h.n_ctx_train, f.get_u32_or(p + "context_length", 4096));
  MT_ASSIGN_OR_RETURN(h.n_ff, f.get_u32_or(p + "feed_forward_length", 0));
  MT_ASSIGN_OR_RETURN(h.n_expert, f.get_u32_or(p + "expert_count", 0));
  MT_ASSIGN_OR_RETURN(h.n_expert_used, f.get_u32_or(p + "expert_used_count", 0));
  MT_ASSIGN_OR_RETURN(h.rms_eps, f.get_f32(p + "attention.layer_norm_rms_epsilon"));
  MT_ASSIGN_OR_RETURN(h.rope_freq_base, f.get_f32_or(p + "rope.freq_base", 10000.0f));

  auto bad = [&](const std::string& m) { return data_loss(std::string(arch_name) + " hyper-parameters: " + m); };
  if (h.n_embd == 0 || h.n_embd > (1u << 20)) return bad("embedding_length " + std::to_string(h.n_embd) + " out of range");
  if (h.n_layer == 0 || h.n_layer > 4096) return bad("block_count " + std::to_string(h.n_layer) + " out of range");
  h.n_layer_file = h.n_layer;
  if (info.routing_keys || info.linear_attention) {
    MT_ASSIGN_OR_RETURN(h.n_nextn, f.get_u32_or(p + "nextn_predict_layers", 0));
    if (h.n_nextn >= h.n_layer) {
      return bad("nextn_predict_layers " + std::to_string(h.n_nextn) + " must be below block_count " + std::to_string(h.n_layer));
    }
    h.n_layer -= h.n_nextn;
  }
  if (info.routing_keys) {
    MT_ASSIGN_OR_RETURN(h.n_dense_lead, f.get_u32_or(p + "leading_dense_block_count", 0));
    if (h.n_dense_lead > h.n_layer) {
      return bad("leading_dense_block_count " + std::to_string(h.n_dense_lead) + " exceeds the " + std::to_string(h.n_layer) + " layers");
    }
  }
  if (h.n_head == 0 || h.n_head > 4096) return bad("head_count " + std::to_string(h.n_head) + " out of range");
  for (uint32_t n : h.n_head_per_layer) {
    if (h.n_head_kv == 0 || n % h.n_head_kv != 0) return bad("a layer's head_count " + std::to_string(n) + " is not a multiple of head_count_kv");
  }
  if (h.n_head_kv == 0 || h.n_head % h.n_head_kv != 0) {
    return bad("head_count " + std::to_string(h.n_head) + " is not a multiple of head_count_kv " + std::to_string(h.n_head_kv));
  }
  MT_ASSIGN_OR_RETURN(h.head_dim, f.get_u32_or(p + "attention.key_length", h.n_embd / h.n_head));
  MT_ASSIGN_OR_RETURN(uint32_t value_dim, f.get_u32_or(p + "attention.value_length", h.head_dim));
  if (h.head_dim == 0 || h.head_dim > 1024 || h.head_dim % 2 != 0) return bad("key_length " + std::to_string(h.head_dim) + " must be even, 2..1024");
  MT_ASSIGN_OR_RETURN(h.n_rot, f.get_u32_or(p + "rope.dimension_count", h.head_dim));
  h.n_rot_swa = h.n_rot;
  h.rope_freq_base_swa = h.rope_freq_base;
  MT_RETURN_IF_ERROR(read_sliding_window(f, p, info, h));
  MT_RETURN_IF_ERROR(read_mla(f, p, value_dim, h));
  if (h.n_rot == 0 || h.n_rot > h.head_dim || h.n_rot % 2 != 0) return bad("rope.dimension_count " + std::to_string(h.n_rot) + " must be even and <= key_length");
  if (h.arch == Arch::kLlama && h.n_rot != h.head_dim) return bad("llama needs rope.dimension_count == key_length");
  if (h.arch == Arch::kOlmoe && h.n_head_kv != h.n_head) return bad("olmoe needs head_count_kv == head_count");
  if (!(h.rms_eps > 0.0f && h.rms_eps < 1.0f)) return bad("layer_norm_rms_epsilon must be in (0, 1)");
  if (!(h.rope_freq_base > 0.0f)) return bad("rope.freq_base must be positive");

  MT_RETURN_IF_ERROR(read_rope_scaling(f, p, h));

  MT_RETURN_IF_ERROR(read_experts(f, p, info, h));

  if (info.linear_attention) MT_RETURN_IF_ERROR(read_linear_attention(f, p, h));

  MT_ASSIGN_OR_RETURN(const gguf::Array* tokens, f.get_array("tokenizer.ggml.tokens"));
  if (tokens->count == 0 || tokens->count > (1u << 24)) return bad("vocabulary size " + std::to_string(tokens->count) + " out of range");
  h.n_vocab = static_cast<uint32_t>(tokens->count);
  return h;
}

}  // namespace mt
