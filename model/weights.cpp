#include "model/weights.h"

#include "quant/reference.h"

namespace mt {
namespace {

class Binder {
 public:
  Binder(const gguf::GgufFile& f) : f_(f) {}

  // Binds `name` with the expected dims (ggml order; trailing dims of 1 may be omitted).
  Status bind(Tensor* out, const std::string& name, std::vector<uint64_t> dims, bool required = true) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) {
      if (required) return not_found("tensor '" + name + "' is missing");
      return {};
    }
    for (uint32_t d = 0; d < 4; ++d) {
      const uint64_t want = d < dims.size() ? dims[d] : 1;
      if (t->ne[d] != want) {
        return data_loss("tensor '" + name + "' has shape " + shape(t->ne) + ", expected " + shape(dims));
      }
    }
    if (!has_dequantize(t->type)) {
      return unimplemented("tensor '" + name + "' has type " + type_name(t->type) + ", which moetier cannot compute yet");
    }
    out->name = name;
    out->type = t->type;
    out->ne = t->ne;
    out->data = f_.tensor_data(*t).data();
    out->row_bytes = t->row_bytes();
    out->matrix_bytes = t->matrix_bytes();
    return {};
  }

 private:
  template <typename Dims>
  static std::string shape(const Dims& dims) {
    std::string s = "(";
    size_t n = dims.size();
    while (n > 1 && dims[n - 1] == 1) --n;
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + ")";
  }
  const gguf::GgufFile& f_;
};

std::string blk(uint32_t l, const char* name) { return "blk." + std::to_string(l) + "." + name; }

// Q/K/V (+ optional biases), the q/k norms the arch has, the output projection; q is this
// layer's query width.
Status bind_attention(Binder& b, const HParams& hp, const ArchInfo& a, uint32_t l, uint64_t q, LayerWeights& L) {
  const uint64_t E = hp.n_embd, kv = hp.kv_dim();
  L.q_gated = a.linear_attention;  // qwen3next / qwen35moe: each head's query, then its gate
  MT_RETURN_IF_ERROR(b.bind(&L.wq, blk(l, "attn_q.weight"), {E, L.q_gated ? 2 * q : q}));
  MT_RETURN_IF_ERROR(b.bind(&L.wk, blk(l, "attn_k.weight"), {E, kv}));
  MT_RETURN_IF_ERROR(b.bind(&L.wv, blk(l, "attn_v.weight"), {E, kv}));
  MT_RETURN_IF_ERROR(b.bind(&L.bq, blk(l, "attn_q.bias"), {q}, false));
  MT_RETURN_IF_ERROR(b.bind(&L.bk, blk(l, "attn_k.bias"), {kv}, false));
  MT_RETURN_IF_ERROR(b.bind(&L.bv, blk(l, "attn_v.bias"), {kv}, false));
  if (a.qk_norm == QkNorm::kPerHead || a.qk_norm == QkNorm::kPerHeadOptional) {
    const bool required = a.qk_norm == QkNorm::kPerHead;
    MT_RETURN_IF_ERROR(b.bind(&L.q_norm, blk(l, "attn_q_norm.weight"), {hp.head_dim}, required));
    MT_RETURN_IF_ERROR(b.bind(&L.k_norm, blk(l, "attn_k_norm.weight"), {hp.head_dim}, required));
    if (L.q_norm.present() != L.k_norm.present()) return data_loss(blk(l, "attn_q_norm / attn_k_norm: one without the other"));
  } else if (a.qk_norm == QkNorm::kFullWidth) {
    MT_RETURN_IF_ERROR(b.bind(&L.q_norm, blk(l, "attn_q_norm.weight"), {q}));
    MT_RETURN_IF_ERROR(b.bind(&L.k_norm, blk(l, "attn_k_norm.weight"), {kv}));
  }
  return b.bind(&L.wo, blk(l, "attn_output.weight"), {q, E});
}

// MLA (deepseek2): q through the low-rank pair or one matrix, the latent row, the per-head
// absorption matrices, the output over n_head * mla_v.
Status bind_mla_attention(Binder& b, const HParams& hp, uint32_t l, LayerWeights& L) {
  const uint64_t E = hp.n_embd, H = hp.n_head, R = hp.kv_lora_rank, QL = hp.q_lora_rank, q = hp.q_dim();
  if (QL > 0) {
    MT_RETURN_IF_ERROR(b.bind(&L.wq_a, blk(l, "attn_q_a.weight"), {E, QL}));
    MT_RETURN_IF_ERROR(b.bind(&L.q_a_norm, blk(l, "attn_q_a_norm.weight"), {QL}));
    MT_RETURN_IF_ERROR(b.bind(&L.wq_b, blk(l, "attn_q_b.weight"), {QL, q}));
  } else {
    MT_RETURN_IF_ERROR(b.bind(&L.wq, blk(l, "attn_q.weight"), {E, q}));
  }
  MT_RETURN_IF_ERROR(b.bind(&L.wkv_a, blk(l, "attn_kv_a_mqa.weight"), {E, R + hp.n_rot}));
  MT_RETURN_IF_ERROR(b.bind(&L.kv_a_norm, blk(l, "attn_kv_a_norm.weight"), {R}));
  MT_RETURN_IF_ERROR(b.bind(&L.wk_b, blk(l, "attn_k_b.weight"), {hp.mla_k - hp.n_rot, R, H}));
  MT_RETURN_IF_ERROR(b.bind(&L.wv_b, blk(l, "attn_v_b.weight"), {R, hp.mla_v, H}));
  return b.bind(&L.wo, blk(l, "attn_output.weight"), {H * hp.mla_v, E});
}

// A Gated DeltaNet layer: the fused q|k|v projection, the output gate z, the causal conv,
// the decay and step-size inputs, the gated norm and the output projection.
Status bind_gated_delta_net(const gguf::GgufFile& file, Binder& b, const HParams& hp, uint32_t l, LayerWeights& L) {
  const uint64_t E = hp.n_embd, nv = hp.ssm_nv, conv = hp.ssm_conv_dim(), V = hp.ssm_value_dim();
  if (file.find_tensor(blk(l, "attn_qkv.weight")) == nullptr && file.find_tensor(blk(l, "ssm_in.weight")) != nullptr) {
    return unimplemented(blk(l, "ssm_in.weight") + ": the legacy fused qkvz layout of early qwen3next files is not supported; "
                         "convert the model again with a current llama.cpp converter");
  }
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_qkv, blk(l, "attn_qkv.weight"), {E, conv}));
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_z, blk(l, "attn_gate.weight"), {E, V}));
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_conv1d, blk(l, "ssm_conv1d.weight"), {hp.ssm_conv, conv}));
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_dt, blk(l, "ssm_dt.bias"), {nv}));
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_a, blk(l, "ssm_a"), {nv}));
  if (hp.arch == Arch::kQwen3Next) {
    MT_RETURN_IF_ERROR(b.bind(&L.ssm_ba, blk(l, "ssm_ba.weight"), {E, 2 * nv}));
  } else {
    MT_RETURN_IF_ERROR(b.bind(&L.ssm_beta, blk(l, "ssm_beta.weight"), {E, nv}));
    MT_RETURN_IF_ERROR(b.bind(&L.ssm_alpha, blk(l, "ssm_alpha.weight"), {E, nv}));
  }
  MT_RETURN_IF_ERROR(b.bind(&L.ssm_norm, blk(l, "ssm_norm.weight"), {hp.ssm_state}));
  return b.bind(&L.ssm_out, blk(l, "ssm_out.weight"), {V, E});
}

// One block's attention (or Gated DeltaNet) and FFN tensors; l is its index in the file.
Status bind_layer(const gguf::GgufFile& file, Binder& b, const HParams& hp, const ArchInfo& a, uint32_t l, LayerWeights& L) {
  const uint64_t E = hp.n_embd;
  const uint64_t q = hp.for_layer(l).q_dim();  // laguna: this layer's query heads
  MT_RETURN_IF_ERROR(b.bind(&L.attn_norm, blk(l, "attn_norm.weight"), {E}));
  if (hp.is_recurrent(l)) {
    MT_RETURN_IF_ERROR(bind_gated_delta_net(file, b, hp, l, L));
  } else {
    MT_RETURN_IF_ERROR(hp.mla ? bind_mla_attention(b, hp, l, L) : bind_attention(b, hp, a, l, q, L));
  }
  if (hp.arch == Arch::kLaguna) {
    // The gate's width says its form: one scalar per head, or one per q element.
    const gguf::TensorInfo* g = file.find_tensor(blk(l, "attn_gate.weight"));
    const uint64_t heads = q / hp.head_dim;
    const uint64_t width = g != nullptr && g->ne[1] == heads ? heads : q;
    MT_RETURN_IF_ERROR(b.bind(&L.attn_gate, blk(l, "attn_gate.weight"), {E, width}));
  }
  if (a.oai) {
    MT_RETURN_IF_ERROR(b.bind(&L.bo, blk(l, "attn_output.bias"), {E}));
    MT_RETURN_IF_ERROR(b.bind(&L.sinks, blk(l, "attn_sinks.weight"), {hp.n_head}));
  }
  MT_RETURN_IF_ERROR(b.bind(&L.ffn_norm, blk(l, (std::string(a.ffn_norm) + ".weight").c_str()), {E}));

  // A layer with a router is MoE; one without is a dense FFN (leading dense blocks). Where
  // the file declares leading_dense_block_count, the layers below it are dense and the
  // rest must be MoE.
  bool moe = hp.n_expert > 0 && file.find_tensor(blk(l, "ffn_gate_inp.weight")) != nullptr;
  if (a.routing_keys && hp.n_expert > 0) {
    moe = l >= hp.n_dense_lead;
    if (!moe && file.find_tensor(blk(l, "ffn_gate_inp.weight")) != nullptr) {
      return data_loss(blk(l, "ffn_gate_inp.weight") + " in a leading dense layer (leading_dense_block_count " +
                       std::to_string(hp.n_dense_lead) + ")");
    }
  }
  if (moe) {
    const uint64_t X = hp.n_expert, F = hp.n_ff_exp;
    MT_RETURN_IF_ERROR(b.bind(&L.router, blk(l, "ffn_gate_inp.weight"), {E, X}));
    // glm4moe requires the selection bias; deepseek2 may have it.
    MT_RETURN_IF_ERROR(b.bind(&L.exp_probs_b, blk(l, "exp_probs_b.bias"), {X}, hp.arch == Arch::kGlm4Moe));
    MT_RETURN_IF_ERROR(b.bind(&L.gate_exps, blk(l, "ffn_gate_exps.weight"), {E, F, X}, hp.arch != Arch::kLlama));
    MT_RETURN_IF_ERROR(b.bind(&L.up_exps, blk(l, "ffn_up_exps.weight"), {E, F, X}));
    MT_RETURN_IF_ERROR(b.bind(&L.down_exps, blk(l, "ffn_down_exps.weight"), {F, E, X}));
    if (a.oai) {
      MT_RETURN_IF_ERROR(b.bind(&L.router_b, blk(l, "ffn_gate_inp.bias"), {X}));
      MT_RETURN_IF_ERROR(b.bind(&L.gate_exps_b, blk(l, "ffn_gate_exps.bias"), {F, X}));
      MT_RETURN_IF_ERROR(b.bind(&L.up_exps_b, blk(l, "ffn_up_exps.bias"), {F, X}));
      MT_RETURN_IF_ERROR(b.bind(&L.down_exps_b, blk(l, "ffn_down_exps.bias"), {E, X}));
      L.swiglu_oai = true;
      for (const Tensor* t : {&L.router_b, &L.gate_exps_b, &L.up_exps_b, &L.down_exps_b}) {
        if (t->type != QuantType::F32) return unimplemented(t->name + " must be F32 (is " + std::string(type_name(t->type)) + ")");
      }
    }
    if (a.shared_expert != SharedExpert::kNone && hp.n_ff_shexp > 0) {
      const uint64_t S = hp.n_ff_shexp;
      if (a.shared_expert == SharedExpert::kGated) {
        MT_RETURN_IF_ERROR(b.bind(&L.shexp_gate_inp, blk(l, "ffn_gate_inp_shexp.weight"), {E}));
      }
      MT_RETURN_IF_ERROR(b.bind(&L.shexp_gate, blk(l, "ffn_gate_shexp.weight"), {E, S}));
      MT_RETURN_IF_ERROR(b.bind(&L.shexp_up, blk(l, "ffn_up_shexp.weight"), {E, S}));
      MT_RETURN_IF_ERROR(b.bind(&L.shexp_down, blk(l, "ffn_down_shexp.weight"), {S, E}));
    }
  } else {
    if (hp.n_ff == 0) return data_loss("layer " + std::to_string(l) + " is dense but feed_forward_length is 0");
    const uint64_t F = hp.n_ff;
    MT_RETURN_IF_ERROR(b.bind(&L.ffn_gate, blk(l, "ffn_gate.weight"), {E, F}));
    MT_RETURN_IF_ERROR(b.bind(&L.ffn_up, blk(l, "ffn_up.weight"), {E, F}));
    MT_RETURN_IF_ERROR(b.bind(&L.ffn_down, blk(l, "ffn_down.weight"), {F, E}));
  }
  return {};
}

// The first NextN block (file index n_layer): a full-attention block and its head.
Status bind_nextn(const gguf::GgufFile& file, Binder& b, const HParams& hp, const ArchInfo& a, NextnWeights& n) {
  const uint32_t l = hp.n_layer;
  const uint64_t E = hp.n_embd, V = hp.n_vocab;
  MT_RETURN_IF_ERROR(bind_layer(file, b, hp, a, l, n.block));
  MT_RETURN_IF_ERROR(b.bind(&n.eh_proj, blk(l, "nextn.eh_proj.weight"), {2 * E, E}));
  MT_RETURN_IF_ERROR(b.bind(&n.enorm, blk(l, "nextn.enorm.weight"), {E}));
  MT_RETURN_IF_ERROR(b.bind(&n.hnorm, blk(l, "nextn.hnorm.weight"), {E}));
  MT_RETURN_IF_ERROR(b.bind(&n.shared_head_norm, blk(l, "nextn.shared_head_norm.weight"), {E}, false));
  MT_RETURN_IF_ERROR(b.bind(&n.shared_head_head, blk(l, "nextn.shared_head_head.weight"), {E, V}, false));
  return b.bind(&n.embed_tokens, blk(l, "nextn.embed_tokens.weight"), {E, V}, false);
}

}  // namespace

StatusOr<ModelWeights> bind_weights(const gguf::GgufFile& file, const HParams& hp) {
  const ArchInfo& a = arch_info(hp.arch);
  Binder b(file);
  ModelWeights w;
  const uint64_t E = hp.n_embd, V = hp.n_vocab;
  MT_RETURN_IF_ERROR(b.bind(&w.token_embd, "token_embd.weight", {E, V}));
  MT_RETURN_IF_ERROR(b.bind(&w.output_norm, "output_norm.weight", {E}));
  MT_RETURN_IF_ERROR(b.bind(&w.output, "output.weight", {E, V}, !a.output_may_be_tied));
  if (!w.output.present()) w.output = w.token_embd;

  w.layers.resize(hp.n_layer);
  for (uint32_t l = 0; l < hp.n_layer; ++l) MT_RETURN_IF_ERROR(bind_layer(file, b, hp, a, l, w.layers[l]));
  if (hp.n_nextn > 0) {  // a NextN block that does not bind leaves plain decoding alone
    NextnWeights n;
    w.nextn_status = bind_nextn(file, b, hp, a, n);
    if (w.nextn_status.ok()) w.nextn.push_back(std::move(n));
  }
  return w;
}

}  // namespace mt
