#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gguf/writer.h"
#include "quant/reference.h"
#include "synth/tensor_types.h"
#include "synth/vocab.h"
#include "synth/weights.h"

namespace mt::synth {
namespace {

struct TensorSpec {
  std::string name;
  Role role;
  uint32_t layer = 0;
  std::vector<uint64_t> ne;  // ggml order
  RowRecipe recipe;
};

std::string blk(uint32_t layer, const char* name) { return "blk." + std::to_string(layer) + "." + name; }

// The value recipes the tensors share: a matrix's spread from its fan-in, norms near 1,
// small biases, the residual branches' gain.
struct Recipes {
  float residual_gain = 1.0f;
  float h_dot_u = 1.0f;  // the normed shared direction's dot with the router's bias axis
  RowRecipe norm, bias;
  static RowRecipe matrix(uint64_t n_in, float gain = 1.0f) {
    RowRecipe r;
    r.stddev = gain / std::sqrt(static_cast<float>(n_in));
    return r;
  }
};

// Gated DeltaNet: q|k|v through the conv, z, the step size and decay inputs, the decay
// rates -exp(A_log) in [-0.45, -0.15] and dt biases near -1 (a per-token decay near 0.9:
// memory over ~10 tokens), the gated norm, ssm_out.
void recurrent_tensors(const SynthConfig& c, uint32_t l, const Recipes& r, std::vector<TensorSpec>& t) {
  const uint64_t E = c.n_embd;
  const uint64_t nv = c.ssm_nv, V = nv * c.ssm_state, conv = 2ull * c.ssm_nk * c.ssm_state + V;
  RowRecipe decay;
  decay.offset = -0.3f;
  decay.stddev = 0.05f;
  RowRecipe dt;
  dt.offset = -1.0f;
  dt.stddev = 0.5f;
  t.push_back({blk(l, "attn_qkv.weight"), Role::kAttnQ, l, {E, conv}, Recipes::matrix(E)});
  t.push_back({blk(l, "attn_gate.weight"), Role::kAttnK, l, {E, V}, Recipes::matrix(E)});
  t.push_back({blk(l, "ssm_conv1d.weight"), Role::kSsmConv, l, {c.ssm_conv, conv}, Recipes::matrix(c.ssm_conv)});
  t.push_back({blk(l, "ssm_dt.bias"), Role::kBias, l, {nv}, dt});
  t.push_back({blk(l, "ssm_a"), Role::kBias, l, {nv}, decay});
  if (c.arch == Arch::kQwen3Next) {
    t.push_back({blk(l, "ssm_ba.weight"), Role::kAttnK, l, {E, 2 * nv}, Recipes::matrix(E)});
  } else {
    t.push_back({blk(l, "ssm_beta.weight"), Role::kAttnK, l, {E, nv}, Recipes::matrix(E)});
    t.push_back({blk(l, "ssm_alpha.weight"), Role::kAttnK, l, {E, nv}, Recipes::matrix(E)});
  }
  t.push_back({blk(l, "ssm_norm.weight"), Role::kNorm, l, {c.ssm_state}, r.norm});
  t.push_back({blk(l, "ssm_out.weight"), Role::kAttnOut, l, {V, E}, Recipes::matrix(V, r.residual_gain)});
}

// MLA layout: q through the low-rank pair (or one matrix), the latent row, the per-head
// absorption matrices, the output over n_head * mla_v.
void mla_tensors(const SynthConfig& c, uint32_t l, uint64_t q_dim, const Recipes& r, std::vector<TensorSpec>& t) {
  const uint64_t E = c.n_embd;
  const uint64_t H = c.n_head, R = c.kv_lora_rank, P = c.n_rot, QL = c.q_lora_rank, V = c.mla_v;
  if (QL > 0) {
    t.push_back({blk(l, "attn_q_a.weight"), Role::kAttnQ, l, {E, QL}, Recipes::matrix(E)});
    t.push_back({blk(l, "attn_q_a_norm.weight"), Role::kNorm, l, {QL}, r.norm});
    t.push_back({blk(l, "attn_q_b.weight"), Role::kAttnQ, l, {QL, q_dim}, Recipes::matrix(QL)});
  } else {
    t.push_back({blk(l, "attn_q.weight"), Role::kAttnQ, l, {E, q_dim}, Recipes::matrix(E)});
  }
  t.push_back({blk(l, "attn_kv_a_mqa.weight"), Role::kAttnK, l, {E, R + P}, Recipes::matrix(E)});
  t.push_back({blk(l, "attn_kv_a_norm.weight"), Role::kNorm, l, {R}, r.norm});
  // q_nope absorbed into the R latent dims: gain sqrt(nope / R) keeps its dot with the
  // (normed) latent row at the spread of a nope-dim dot, as in a plain head.
  const uint64_t nope = c.head_dim - P;
  t.push_back({blk(l, "attn_k_b.weight"), Role::kAttnK, l, {nope, R, H},
               Recipes::matrix(nope, std::sqrt(static_cast<float>(nope) / static_cast<float>(R)))});
  t.push_back({blk(l, "attn_v_b.weight"), Role::kAttnV, l, {R, V, H}, Recipes::matrix(R)});
  t.push_back({blk(l, "attn_output.weight"), Role::kAttnOut, l, {H * V, E}, Recipes::matrix(H * V, r.residual_gain)});
}

// Plain attention: q, k, v (biases, q/k norms where the architecture has them), output.
void plain_attention_tensors(const SynthConfig& c, uint32_t l, uint64_t q_dim, const Recipes& r,
                             std::vector<TensorSpec>& t) {
  const ArchInfo& a = arch_info(c.arch);
  const uint64_t E = c.n_embd, kv_dim = uint64_t{c.n_head_kv} * c.head_dim;
  t.push_back({blk(l, "attn_q.weight"), Role::kAttnQ, l, {E, q_dim}, Recipes::matrix(E)});
  t.push_back({blk(l, "attn_k.weight"), Role::kAttnK, l, {E, kv_dim}, Recipes::matrix(E)});
  t.push_back({blk(l, "attn_v.weight"), Role::kAttnV, l, {E, kv_dim}, Recipes::matrix(E)});
  if (a.qkv_bias) {
    t.push_back({blk(l, "attn_q.bias"), Role::kBias, l, {q_dim}, r.bias});
    t.push_back({blk(l, "attn_k.bias"), Role::kBias, l, {kv_dim}, r.bias});
    t.push_back({blk(l, "attn_v.bias"), Role::kBias, l, {kv_dim}, r.bias});
  }
  if (a.qk_norm == QkNorm::kPerHead || (a.qk_norm == QkNorm::kPerHeadOptional && c.qk_norm)) {
    t.push_back({blk(l, "attn_q_norm.weight"), Role::kNorm, l, {c.head_dim}, r.norm});
    t.push_back({blk(l, "attn_k_norm.weight"), Role::kNorm, l, {c.head_dim}, r.norm});
  } else if (a.qk_norm == QkNorm::kFullWidth) {
    t.push_back({blk(l, "attn_q_norm.weight"), Role::kNorm, l, {q_dim}, r.norm});
    t.push_back({blk(l, "attn_k_norm.weight"), Role::kNorm, l, {kv_dim}, r.norm});
  }
  t.push_back({blk(l, "attn_output.weight"), Role::kAttnOut, l, {q_dim, E}, Recipes::matrix(q_dim, r.residual_gain)});
}

// A block's mixer: recurrent, gated full attention, MLA or plain, then laguna's gate and
// gpt-oss's output bias and sinks.
void attention_tensors(const SynthConfig& c, uint32_t l, const Recipes& r, std::vector<TensorSpec>& t) {
  const ArchInfo& a = arch_info(c.arch);
  const uint64_t E = c.n_embd, kv_dim = uint64_t{c.n_head_kv} * c.head_dim;
  // laguna: the sliding-window layers (all but every 4th) may have more query heads.
  const bool swa_layer = c.arch == Arch::kLaguna && c.n_swa > 0 && l % 4 != 0;
  const uint64_t q_dim = uint64_t{swa_layer && c.n_head_swa ? c.n_head_swa : c.n_head} * c.head_dim;
  const bool recurrent = a.linear_attention && l < c.n_layer && (l + 1) % c.full_attention_interval != 0;
  if (recurrent) {
    recurrent_tensors(c, l, r, t);
  } else if (a.linear_attention) {
    // Gated full attention: attn_q gives each head's query and its output gate.
    t.push_back({blk(l, "attn_q.weight"), Role::kAttnQ, l, {E, 2 * q_dim}, Recipes::matrix(E)});
    t.push_back({blk(l, "attn_k.weight"), Role::kAttnK, l, {E, kv_dim}, Recipes::matrix(E)});
    t.push_back({blk(l, "attn_v.weight"), Role::kAttnV, l, {E, kv_dim}, Recipes::matrix(E)});
    t.push_back({blk(l, "attn_q_norm.weight"), Role::kNorm, l, {c.head_dim}, r.norm});
    t.push_back({blk(l, "attn_k_norm.weight"), Role::kNorm, l, {c.head_dim}, r.norm});
    t.push_back({blk(l, "attn_output.weight"), Role::kAttnOut, l, {q_dim, E}, Recipes::matrix(q_dim, r.residual_gain)});
  } else if (c.arch == Arch::kDeepseek2) {
    mla_tensors(c, l, q_dim, r, t);
  } else {
    plain_attention_tensors(c, l, q_dim, r, t);
  }
  if (c.arch == Arch::kLaguna) {
    t.push_back({blk(l, "attn_gate.weight"), Role::kAttnQ, l, {E, c.gate_per_head ? q_dim / c.head_dim : q_dim},
                 Recipes::matrix(E)});
  }
  if (a.oai) {
    RowRecipe sink;
    sink.stddev = 1.0f;  // logits of the scores' order: the sink takes a real share
    t.push_back({blk(l, "attn_output.bias"), Role::kBias, l, {E}, r.bias});
    t.push_back({blk(l, "attn_sinks.weight"), Role::kBias, l, {c.n_head}, sink});
  }
}

// A MoE block's feed-forward: router (its skew along the shared direction), the experts,
// gpt-oss's biases, the selection bias, the shared expert, NextN's extras.
void moe_tensors(const SynthConfig& c, uint32_t l, const Recipes& r, std::vector<TensorSpec>& t) {
  const ArchInfo& a = arch_info(c.arch);
  const uint64_t E = c.n_embd;
  RowRecipe router = Recipes::matrix(E);
  router.orthogonal_to_u = true;
  for (float b : router_biases(c.seed, l, c.n_expert, c.router_skew)) router.per_row_u.push_back(b / r.h_dot_u);
  t.push_back({blk(l, "ffn_gate_inp.weight"), Role::kRouter, l, {E, c.n_expert}, router});
  t.push_back({blk(l, "ffn_gate_exps.weight"), Role::kExpGate, l, {E, c.n_ff_exp, c.n_expert}, Recipes::matrix(E)});
  t.push_back({blk(l, "ffn_up_exps.weight"), Role::kExpUp, l, {E, c.n_ff_exp, c.n_expert}, Recipes::matrix(E)});
  // The routed weights sum to weights_scale (2.5 in DeepSeek-V3 / GLM): the down matrices
  // carry its inverse, so the residual stream grows as in the other architectures.
  t.push_back({blk(l, "ffn_down_exps.weight"), Role::kExpDown, l, {c.n_ff_exp, E, c.n_expert},
               Recipes::matrix(c.n_ff_exp, r.residual_gain / c.weights_scale)});
  if (a.oai) {
    RowRecipe expert_bias;
    expert_bias.stddev = 0.05f;
    t.push_back({blk(l, "ffn_gate_inp.bias"), Role::kBias, l, {c.n_expert}, expert_bias});
    t.push_back({blk(l, "ffn_gate_exps.bias"), Role::kBias, l, {c.n_ff_exp, c.n_expert}, expert_bias});
    t.push_back({blk(l, "ffn_up_exps.bias"), Role::kBias, l, {c.n_ff_exp, c.n_expert}, expert_bias});
    t.push_back({blk(l, "ffn_down_exps.bias"), Role::kBias, l, {E, c.n_expert}, r.bias});
  }
  if (a.routing_keys && c.selection_bias) {
    RowRecipe selection_bias;
    selection_bias.stddev = 0.05f;  // comparable to the sigmoid scores' spread: it changes choices
    t.push_back({blk(l, "exp_probs_b.bias"), Role::kExpProbsB, l, {c.n_expert}, selection_bias});
  }
  const uint64_t S = a.shared_expert == SharedExpert::kUngated ? uint64_t{c.n_ff_exp} * c.n_expert_shared : c.n_ff_shexp;
  if (a.shared_expert == SharedExpert::kGated) {
    t.push_back({blk(l, "ffn_gate_inp_shexp.weight"), Role::kSharedGateInp, l, {E}, Recipes::matrix(E)});
  }
  if (S > 0) {
    t.push_back({blk(l, "ffn_gate_shexp.weight"), Role::kShexpGate, l, {E, S}, Recipes::matrix(E)});
    t.push_back({blk(l, "ffn_up_shexp.weight"), Role::kShexpUp, l, {E, S}, Recipes::matrix(E)});
    t.push_back({blk(l, "ffn_down_shexp.weight"), Role::kShexpDown, l, {S, E}, Recipes::matrix(S, r.residual_gain)});
  }
  if (l >= c.n_layer) {  // NextN: loaded by llama.cpp, unused by plain decoding
    t.push_back({blk(l, "nextn.eh_proj.weight"), Role::kNextnProj, l, {2 * E, E}, Recipes::matrix(2 * E)});
    t.push_back({blk(l, "nextn.enorm.weight"), Role::kNorm, l, {E}, r.norm});
    t.push_back({blk(l, "nextn.hnorm.weight"), Role::kNorm, l, {E}, r.norm});
    t.push_back({blk(l, "nextn.shared_head_norm.weight"), Role::kNorm, l, {E}, r.norm});
  }
}

// Every tensor of the model with its shape (ggml order: ne0 = n_in) and value recipe.
std::vector<TensorSpec> plan_tensors(const SynthConfig& c, uint32_t n_vocab) {
  const ArchInfo& a = arch_info(c.arch);
  const uint64_t E = c.n_embd;
  Recipes r;
  r.residual_gain = 1.0f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  r.norm.offset = 1.0f;
  r.norm.stddev = 0.05f;
  r.bias.stddev = 0.02f;
  // The shared direction's weight in the embeddings and what RMSNorm makes of it.
  const float embd_u = 0.5f * std::sqrt(static_cast<float>(E));
  r.h_dot_u = embd_u / std::sqrt(1.25f);

  std::vector<TensorSpec> t;
  RowRecipe embd;
  embd.stddev = 1.0f;
  // A --fast file carries the shared component only for a skewed router: its weights have
  // no other structure, and the stack's common response to the component would bias the
  // routing of a uniform file's deeper layers (~0.5 of the selections to the top quarter
  // of the experts by layer 8 instead of 0.25).
  embd.u_weight = (c.router_skew > 0.0f || !c.fast) ? embd_u : 0.0f;
  t.push_back({"token_embd.weight", Role::kEmbedding, 0, {E, n_vocab}, embd});
  // The main stack, then the NextN blocks (a whole MoE block plus their projection and norms).
  for (uint32_t l = 0; l < c.n_layer + c.n_nextn; ++l) {
    t.push_back({blk(l, "attn_norm.weight"), Role::kNorm, l, {E}, r.norm});
    attention_tensors(c, l, r, t);
    t.push_back({blk(l, (std::string(a.ffn_norm) + ".weight").c_str()), Role::kNorm, l, {E}, r.norm});
    if (l < c.n_dense_lead) {
      const uint64_t F = c.n_ff;
      t.push_back({blk(l, "ffn_gate.weight"), Role::kDenseGate, l, {E, F}, Recipes::matrix(E)});
      t.push_back({blk(l, "ffn_up.weight"), Role::kDenseUp, l, {E, F}, Recipes::matrix(E)});
      t.push_back({blk(l, "ffn_down.weight"), Role::kDenseDown, l, {F, E}, Recipes::matrix(F, r.residual_gain)});
      continue;
    }
    moe_tensors(c, l, r, t);
  }
  t.push_back({"output_norm.weight", Role::kNorm, 0, {E}, r.norm});
  if (!c.tie_output) t.push_back({"output.weight", Role::kOutput, 0, {E, n_vocab}, Recipes::matrix(E)});
  return t;
}

void write_hparams(const SynthConfig& c, uint32_t n_vocab, gguf::GgufWriter& w) {
  const ArchInfo& a = arch_info(c.arch);
  const std::string p(a.name);
  w.set_string("general.architecture", p);
  w.set_string("general.name", "moetier-synth " + c.name);
  w.set_u32("general.file_type", file_type_of(c.quant));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(p + ".vocab_size", n_vocab);
  w.set_u32(p + ".context_length", c.n_ctx);
  w.set_u32(p + ".embedding_length", c.n_embd);
  w.set_u32(p + ".block_count", c.n_layer + c.n_nextn);
  w.set_u32(p + ".feed_forward_length", a.expert_ff_key ? (c.n_ff != 0 ? c.n_ff : c.n_ff_exp) : c.n_ff_exp);
  w.set_u32(p + ".attention.head_count", c.n_head);
  if (c.arch == Arch::kDeepseek2) {  // MLA: one latent "head" of kv_lora_rank + rope dims
    w.set_u32(p + ".attention.head_count_kv", 1);
    w.set_u32(p + ".attention.key_length", c.kv_lora_rank + c.n_rot);
    w.set_u32(p + ".attention.value_length", c.kv_lora_rank);
    w.set_u32(p + ".attention.key_length_mla", c.head_dim);
    w.set_u32(p + ".attention.value_length_mla", c.mla_v);
    w.set_u32(p + ".attention.kv_lora_rank", c.kv_lora_rank);
    // 0 written out: llama.cpp needs the key unless the layer count says "lite" (26 / 27).
    w.set_u32(p + ".attention.q_lora_rank", c.q_lora_rank);
  } else {
    w.set_u32(p + ".attention.head_count_kv", c.n_head_kv);
    w.set_u32(p + ".attention.key_length", c.head_dim);
    w.set_u32(p + ".attention.value_length", c.head_dim);
  }
  w.set_f32(p + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w.set_u32(p + ".rope.dimension_count", c.n_rot != 0 ? c.n_rot : c.head_dim);
  w.set_f32(p + ".rope.freq_base", c.rope_freq_base);
  if (c.yarn_factor > 0.0f) {
    w.set_string(p + ".rope.scaling.type", "yarn");
    w.set_f32(p + ".rope.scaling.factor", c.yarn_factor);
    w.set_u32(p + ".rope.scaling.original_context_length", c.yarn_orig_ctx);
    if (c.yarn_mscale_all_dim != 0.0f) w.set_f32(p + ".rope.scaling.yarn_log_multiplier", 0.1f * c.yarn_mscale_all_dim);
  }
  w.set_u32(p + ".expert_count", c.n_expert);
  w.set_u32(p + ".expert_used_count", c.n_expert_used);
  if (a.expert_ff_key) w.set_u32(p + ".expert_feed_forward_length", c.n_ff_exp);
  if (a.shared_expert == SharedExpert::kGated) w.set_u32(p + ".expert_shared_feed_forward_length", c.n_ff_shexp);
  if (a.shared_expert == SharedExpert::kUngated) w.set_u32(p + ".expert_shared_count", c.n_expert_shared);
  if (a.routing_keys) {
    w.set_u32(p + ".leading_dense_block_count", c.n_dense_lead);
    if (c.n_nextn > 0) w.set_u32(p + ".nextn_predict_layers", c.n_nextn);
    w.set_f32(p + ".expert_weights_scale", c.weights_scale);
    w.set_bool(p + ".expert_weights_norm", c.weights_norm);
    w.set_u32(p + ".expert_gating_func", c.sigmoid ? 2 : 1);
  }
  if (c.arch == Arch::kLaguna) {
    // head_count as one INT32 per layer, as the converter writes it.
    std::vector<int32_t> heads;
    for (uint32_t l = 0; l < c.n_layer; ++l) {
      heads.push_back(static_cast<int32_t>(c.n_swa > 0 && l % 4 != 0 && c.n_head_swa ? c.n_head_swa : c.n_head));
    }
    w.set_i32_array(p + ".attention.head_count", heads);
    w.set_u32(p + ".expert_shared_feed_forward_length", c.n_ff_exp * c.n_expert_shared);
    if (c.n_swa > 0) {
      w.set_u32(p + ".attention.sliding_window", c.n_swa);
      w.set_f32(p + ".rope.freq_base_swa", c.rope_freq_base_swa > 0.0f ? c.rope_freq_base_swa : c.rope_freq_base);
      w.set_u32(p + ".rope.dimension_count_swa", c.n_rot_swa != 0 ? c.n_rot_swa : (c.n_rot != 0 ? c.n_rot : c.head_dim));
    }
  }
  if (a.oai) {
    w.set_u32(p + ".attention.sliding_window", c.n_swa);
    w.set_u32(p + ".attention.sliding_window_pattern", 2);
    w.set_f32(p + ".rope.freq_base_swa", c.rope_freq_base_swa > 0.0f ? c.rope_freq_base_swa : c.rope_freq_base);
  }
  if (a.linear_attention) {
    const uint32_t V = c.ssm_nv * c.ssm_state;
    w.set_u32(p + ".ssm.conv_kernel", c.ssm_conv);
    w.set_u32(p + ".ssm.inner_size", V);
    w.set_u32(p + ".ssm.state_size", c.ssm_state);
    w.set_u32(p + ".ssm.time_step_rank", c.ssm_nv);
    w.set_u32(p + ".ssm.group_count", c.ssm_nk);
    w.set_u32(p + ".full_attention_interval", c.full_attention_interval);
    if (c.n_nextn > 0) w.set_u32(p + ".nextn_predict_layers", c.n_nextn);
    if (c.arch == Arch::kQwen35Moe) {
      // IMROPE sections over the rotated pairs (the released [11, 11, 10, 0] for 64 dims):
      // t, h, w interleaved, every pair on one of them (text: the token's position).
      const int32_t pairs = static_cast<int32_t>((c.n_rot != 0 ? c.n_rot : c.head_dim) / 2);
      const int32_t third = (pairs + 2) / 3;
      w.set_i32_array(p + ".rope.dimension_sections", {third, third, pairs - 2 * third, 0});
    }
  }
  if (c.n_expert_groups > 1) {
    w.set_u32(p + ".expert_group_count", c.n_expert_groups);
    w.set_u32(p + ".expert_group_used_count", c.n_group_used);
  }
  w.set_string("moetier.synth.preset", c.name);
  w.set_string("moetier.synth.quant", c.quant.name);
  w.set(std::string("moetier.synth.seed"), gguf::Value::u64(c.seed));
  w.set_f32("moetier.synth.router_skew", c.router_skew);
  w.set_bool("moetier.synth.fast", c.fast);
}

// Produces rows of one tensor: generated floats, converted or quantized to `type`.
class RowSource {
 public:
  RowSource(const TensorSpec& spec, QuantType type, const std::vector<float>& u, uint64_t seed, bool fast)
      : spec_(spec), type_(type), u_(u), seed_(hash_name(seed, spec.name)),
        row_bytes_(*row_bytes(type, spec.ne[0])) {
    // Routers and vectors are small and carry structure: always generated in full.
    fast_ = fast && spec.role != Role::kRouter && spec.ne.size() > 1;
    if (fast_) {
      uint64_t rows = 1;
      for (size_t d = 1; d < spec.ne.size(); ++d) rows *= spec.ne[d];
      pool_rows_ = std::min<uint64_t>(rows, 32);
      // Rotate by whole blocks of at least kSharedDirectionPeriod values (the embeddings'
      // shared component survives the rotation).
      const TypeTraits& tr = type_traits(type_);
      rotation_unit_ = tr.block_bytes;
      if (tr.block_elems < kSharedDirectionPeriod && kSharedDirectionPeriod % tr.block_elems == 0 &&
          row_bytes_ % (tr.block_bytes * (kSharedDirectionPeriod / tr.block_elems)) == 0) {
        rotation_unit_ = tr.block_bytes * (kSharedDirectionPeriod / tr.block_elems);
      }
      pool_.resize(pool_rows_ * row_bytes_);
      for (uint64_t r = 0; r < pool_rows_; ++r) make(r, pool_.data() + r * row_bytes_);
    }
  }

  void fill(uint64_t first, uint64_t n, uint8_t* dst) {
    for (uint64_t i = 0; i < n; ++i) {
      uint8_t* out = dst + i * row_bytes_;
      if (!fast_) {
        make(first + i, out);
        continue;
      }
      // A pool row rotated by a random number of blocks: valid blocks, cheap to make.
      Rng rng(mix(seed_, first + i));
      const uint8_t* src = pool_.data() + (rng.next() % pool_rows_) * row_bytes_;
      const uint64_t shift = (rng.next() % (row_bytes_ / rotation_unit_)) * rotation_unit_;
      std::memcpy(out, src + shift, row_bytes_ - shift);
      std::memcpy(out + (row_bytes_ - shift), src, shift);
    }
  }

 private:
  void make(uint64_t r, uint8_t* out) {
    floats_.resize(spec_.ne[0]);
    make_row(spec_.recipe, u_, seed_, r, floats_.data(), spec_.ne[0]);
    if (type_ == QuantType::F32) {
      std::memcpy(out, floats_.data(), row_bytes_);
    } else {
      quantize_row(type_, floats_.data(), out, static_cast<int64_t>(spec_.ne[0]));
    }
  }

  TensorSpec spec_;
  QuantType type_;
  const std::vector<float>& u_;
  uint64_t seed_;
  uint64_t row_bytes_;
  bool fast_ = false;
  uint64_t pool_rows_ = 0;
  uint64_t rotation_unit_ = 0;  // bytes
  std::vector<uint8_t> pool_;
  std::vector<float> floats_;
};

}  // namespace

StatusOr<SynthSummary> write_model(const SynthConfig& c, const WriteParams& params) {
  MT_RETURN_IF_ERROR(validate(c));
  gguf::GgufWriter w;
  // Hyper-parameters first (llama.cpp's converter order), then the tokenizer.
  write_hparams(c, 0, w);
  MT_ASSIGN_OR_RETURN(uint32_t n_vocab, write_vocab(c, w));
  write_hparams(c, n_vocab, w);

  auto u = std::make_shared<std::vector<float>>(shared_direction(c.seed, c.n_embd, c.fast));
  SynthSummary summary;
  summary.n_vocab = n_vocab;
  for (const TensorSpec& spec : plan_tensors(c, n_vocab)) {
    const QuantType type = choose_type(c, spec.role, spec.layer, spec.ne[0]);
    if (!has_quantize(type) && type != QuantType::F32) {
      return unimplemented("synth: no quantizer for " + std::string(type_name(type)) + " (tensor " + spec.name + ")");
    }
    uint64_t n = 1;
    for (uint64_t d : spec.ne) n *= d;
    summary.n_params += n;
    ++summary.n_tensors;
    gguf::FillRows fill;
    if (!c.sparse) {
      auto source = std::make_shared<RowSource>(spec, type, *u, c.seed, c.fast);
      fill = [source, u](uint64_t first, uint64_t rows, uint8_t* dst) { source->fill(first, rows, dst); };
    }
    w.add_tensor(spec.name, type, spec.ne, std::move(fill));
  }
  gguf::WriteOptions options;
  options.sparse = c.sparse;
  options.progress = params.progress;
  MT_RETURN_IF_ERROR(w.write(params.path, options));
  MT_ASSIGN_OR_RETURN(summary.file_bytes, w.file_size());
  return summary;
}

}  // namespace mt::synth
