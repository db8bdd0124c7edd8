// Weights bound zero-copy from the GGUF memory map, with their shapes checked against
// the hyper-parameters at load.
//
// A Tensor is a typed view of file bytes: ne[0] is the reduction dimension (n_in), each
// of the ne[1] rows is `row_bytes` long, and a 3-D expert tensor holds ne[2] matrices of
// `matrix_bytes` each. A missing optional tensor has data == nullptr.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/reader.h"
#include "model/hparams.h"
#include "quant/types.h"

namespace mt {

struct Tensor {
  std::string name;
  QuantType type = QuantType::F32;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;
  uint64_t matrix_bytes = 0;
  // Rows stored in cpu/repack.h's interleaved layout (groups of 8): only matmul may read
  // the data then, row() is meaningless.
  bool interleaved = false;

  bool present() const { return data != nullptr; }
  const uint8_t* row(uint64_t r, uint64_t matrix = 0) const { return data + matrix * matrix_bytes + r * row_bytes; }
};

struct LayerWeights {
  Tensor attn_norm;                        // (n_embd)
  Tensor wq, wk, wv;                       // (n_embd, q_dim) (n_embd, kv_dim) (n_embd, kv_dim)
  Tensor bq, bk, bv;                       // optional biases (q_dim) (kv_dim) (kv_dim)
  Tensor q_norm, k_norm;                   // per head (head_dim) or full width (q_dim)/(kv_dim)
  Tensor wo;                               // (q_dim, n_embd); MLA: (n_head * mla_v, n_embd)
  // MLA (deepseek2): q through a low-rank pair or one attn_q (wq), the latent row, and the
  // per-head absorption matrices.
  Tensor wq_a, q_a_norm, wq_b;             // (n_embd, q_lora_rank) (q_lora_rank) (q_lora_rank, n_head * mla_k)
  Tensor wkv_a, kv_a_norm;                 // (n_embd, kv_lora_rank + n_rot) (kv_lora_rank)
  Tensor wk_b;                             // (mla_k - n_rot, kv_lora_rank, n_head): q_nope -> latent
  Tensor wv_b;                             // (kv_lora_rank, mla_v, n_head): latent -> value
  Tensor ffn_norm;                         // (n_embd) ffn_norm or post_attention_norm (ArchInfo::ffn_norm)
  // MoE layers
  Tensor router;                           // (n_embd, n_expert)
  Tensor exp_probs_b;                      // (n_expert) selection bias (glm4moe, deepseek2)
  Tensor router_b;                         // (n_expert) gpt-oss: added to the router logits
  Tensor gate_exps_b, up_exps_b;           // (n_ff_exp, n_expert) gpt-oss expert biases
  Tensor down_exps_b;                      // (n_embd, n_expert)
  Tensor bo;                               // (n_embd) attn_output bias (gpt-oss)
  Tensor sinks;                            // (n_head) attention sink logits (gpt-oss)
  bool swiglu_oai = false;                 // experts use gpt-oss's clamped SwiGLU
  Tensor attn_gate;                        // laguna: (n_embd, n_head) per head or (n_embd, q_dim) per element
  // Gated DeltaNet layers (qwen3next / qwen35moe), moe_arch_facts_hybrid.md §1.3
  Tensor ssm_qkv;                          // attn_qkv (n_embd, conv_dim): all q heads, all k heads, all v heads
  Tensor ssm_z;                            // attn_gate (n_embd, value_dim): the output gate
  Tensor ssm_conv1d;                       // (ssm_conv, conv_dim): each channel's taps, oldest first
  Tensor ssm_dt;                           // (nv) ssm_dt.bias
  Tensor ssm_a;                            // (nv) -exp(A_log)
  Tensor ssm_ba;                           // qwen3next: (n_embd, 2 nv), per key head [b x r | a x r]
  Tensor ssm_beta, ssm_alpha;              // qwen35moe: (n_embd, nv) each
  Tensor ssm_norm;                         // (ssm_state) the gated RMSNorm's weight
  Tensor ssm_out;                          // (value_dim, n_embd)
  bool q_gated = false;                    // attn_q (n_embd, 2 q_dim): per head [query | gate], o *= sigmoid(gate)
  Tensor gate_exps, up_exps;               // (n_embd, n_ff_exp, n_expert); gate optional
  Tensor down_exps;                        // (n_ff_exp, n_embd, n_expert)
  Tensor shexp_gate_inp;                   // (n_embd) qwen2moe's shared-expert gate
  Tensor shexp_gate, shexp_up;             // (n_embd, n_ff_shexp), ungated when shexp_gate_inp is absent
  Tensor shexp_down;                       // (n_ff_shexp, n_embd)
  // dense layers
  Tensor ffn_gate, ffn_up;                 // (n_embd, n_ff)
  Tensor ffn_down;                         // (n_ff, n_embd)

  bool is_moe() const { return router.present(); }
};

// A NextN (MTP) block after the main stack (blk.N, N = block_count - nextn_predict_layers):
// a full-attention block with the trunk's FFN, and its head: the guess for position p + 2
// from the trunk's final hidden state at p (after output_norm) and the token at p + 1 is
// (shared_head_head or output) . norm(block(eh_proj . [enorm(embed(tok)) | hnorm(h)]))
// with shared_head_norm (or output_norm). ../shared/reference/moe_arch_facts_hybrid.md §1.11.
struct NextnWeights {
  LayerWeights block;
  Tensor eh_proj;                          // (2 n_embd, n_embd): [embedding | hidden] -> n_embd
  Tensor enorm, hnorm;                     // (n_embd)
  Tensor shared_head_norm;                 // (n_embd) optional: output_norm
  Tensor shared_head_head;                 // (n_embd, n_vocab) optional: output
  Tensor embed_tokens;                     // (n_embd, n_vocab) optional: token_embd
};

struct ModelWeights {
  Tensor token_embd;                       // (n_embd, n_vocab)
  Tensor output_norm;                      // (n_embd)
  Tensor output;                           // (n_embd, n_vocab); token_embd when tied
  std::vector<LayerWeights> layers;
  // The file's first NextN block, when it has one that binds (plain decoding never reads
  // it); nextn_status says why not where the file declares one that does not bind.
  std::vector<NextnWeights> nextn;
  Status nextn_status;
};

// Binds every tensor the architecture needs; errors name the tensor and what is wrong
// (missing, wrong shape, a type moetier cannot compute).
StatusOr<ModelWeights> bind_weights(const gguf::GgufFile& file, const HParams& hp);

}  // namespace mt
