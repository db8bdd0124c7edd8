// The model's weights in device memory, laid out so the decode step needs few launches:
// every tensor keeps its GGUF rows byte for byte, but matrices one step multiplies by the
// same activations sit next to each other, so a single product covers them:
//   wq | wk | wv rows back to back (when the three share type and row bytes): wqkv, one
//       (n_embd -> q_dim + 2 kv_dim) matrix; else wq | wk (wqk) when those two share them;
//   per expert e: gate[e] rows then up[e] rows, so gate_exps and up_exps are views with
//       the matrix stride of the pair, and gate_up_exps is one (n_embd -> 2 n_ff) matrix
//       per expert; the shared expert's and dense FFN's gate | up likewise.
// A combined view has data == nullptr when its parts cannot share one product.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "model/model.h"

namespace mt::cuda {

struct DevLayer {
  DeviceMatrix wq, wk, wv, wo;  // (n_embd -> q_dim / kv_dim), (q_dim -> n_embd)
  DeviceMatrix wqkv;            // (n_embd -> q_dim + 2 kv_dim) over wq | wk | wv, or none
  DeviceMatrix wqk;             // (n_embd -> q_dim + kv_dim) over wq | wk where wqkv is none, or none
  DeviceMatrix router, gate_exps, up_exps, down_exps;  // experts: n_mat = n_expert
  DeviceMatrix gate_up_exps;                           // (n_embd -> 2 n_ff_exp) per expert, or none
  DeviceMatrix shexp_gate, shexp_up, shexp_down, shexp_gate_up;
  DeviceMatrix ffn_gate, ffn_up, ffn_down, ffn_gate_up;
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *shexp_gate_inp = nullptr;
  const float* exp_probs_b = nullptr;  // (n_expert) the routing selection bias, or null
  bool moe = false;
  // Gated DeltaNet layers (qwen3next / qwen35moe): the input projections as one product
  // when they stack (rows qkv | z | b | a, or qkv | z | ba), else apart; the output.
  DeviceMatrix gdn_in;
  DeviceMatrix ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_ba, ssm_out;
  const float *ssm_conv1d = nullptr, *ssm_dt = nullptr, *ssm_a = nullptr, *ssm_norm = nullptr;  // (C, Kc) (nv) (nv) (dk)
  bool recurrent = false;
  bool q_gated = false;  // attn_q rows: per head [query | gate]
  // gpt-oss: the output bias (n_embd), per-head sink logits (n_head), the router's bias
  // (n_expert), per-expert biases (n_expert, n_ff) (n_expert, n_ff) (n_expert, n_embd).
  const float *bo = nullptr, *sinks = nullptr, *router_b = nullptr;
  const float *gate_exps_b = nullptr, *up_exps_b = nullptr, *down_exps_b = nullptr;
  bool swiglu_oai = false;  // experts use the clamped SwiGLU
  DeviceMatrix attn_gate;   // laguna: (n_embd -> n_head) per head or (-> q_dim) per element
  // Multi-head latent attention (deepseek2; model/attention_mla.cpp): q through the
  // low-rank pair wq_a, q_a_norm, wq_b (or one wq), the latent row wkv_a (n_embd ->
  // kv_lora_rank + n_rot), kv_a_norm (kv_lora_rank); per head (n_mat = n_head) wk_b
  // (mla_k - n_rot -> kv_lora_rank) and wv_b (kv_lora_rank -> mla_v).
  DeviceMatrix wq_a, wq_b, wkv_a, wk_b, wv_b;
  const float *q_a_norm = nullptr, *kv_a_norm = nullptr;
  bool mla = false;
};

// Overrides MOETIER_CUDA_STACK_QK (wq | wk stacked where wv cannot join them; on by
// default) for the uploads that follow (tests, A/B runs).
void set_stack_qk(bool on);

class DeviceWeights {
 public:
  // Bytes of device memory upload() will take for `model`.
  static uint64_t bytes_needed(const Model& model, bool experts_on_host = false);
  // Copies every weight of `model` (loaded with interleave off) to the device; with
  // experts_on_host the routed experts' views keep their shapes but no data (tiering).
  void upload(const Model& model, bool experts_on_host = false);

  DeviceMatrix token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DevLayer> layers;
  uint64_t bytes() const { return used_; }

  // Every matrix view (for workspace sizing).
  std::vector<const DeviceMatrix*> matrices() const;

 private:
  void place_all(const Model& model, bool dry);
  uint8_t* reserve(uint64_t bytes, bool dry);
  DeviceMatrix matrix(const Tensor& t, bool dry);
  const float* vec(const std::vector<float>& v, bool dry);
  // An F32 tensor's floats as they are (the expert bias tables), or null when absent.
  const float* floats(const Tensor& t, bool dry);
  // wq | wk | wv style: n dense tensors back to back; views into *out, the combined view
  // returned (data null when they cannot be one matrix, each then placed on its own).
  DeviceMatrix stacked(std::initializer_list<const Tensor*> parts, std::initializer_list<DeviceMatrix*> out, bool dry);
  // gate | up per expert (see above); data null when not combinable.
  DeviceMatrix paired_experts(const Tensor& gate, const Tensor& up, DeviceMatrix* gate_out, DeviceMatrix* up_out,
                              bool dry);

  DeviceBuffer buffer_;
  uint64_t used_ = 0;
  bool experts_on_host_ = false;
};

}  // namespace mt::cuda
