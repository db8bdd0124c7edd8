// The MoE architectures moetier knows, by their GGUF `general.architecture` name, with
// the per-architecture facts every layer above needs (routing math, RoPE style, which
// optional tensors exist). Source of the facts: ../shared/reference/moe_arch_facts.md.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace mt {

enum class Arch { kQwen3Moe, kQwen2Moe, kLlama, kOlmoe, kGlm4Moe, kDeepseek2, kGptOss, kLaguna, kQwen3Next, kQwen35Moe };

enum class RopeStyle { kNorm, kNeox };  // adjacent pairs vs halves
// kPerHeadOptional: per-head norms used where the file has them (GLM-4.5 355B has, Air not).
enum class QkNorm { kNone, kPerHead, kFullWidth, kPerHeadOptional };
// How router logits become expert scores (`{arch}.expert_gating_func`: 1 softmax, 2 sigmoid).
// kSoftmaxOfSelected (gpt-oss): top-k on the raw logits, the weights a softmax over those k.
enum class ExpertGating { kSoftmax, kSigmoid, kSoftmaxOfSelected };
// kGated: one expert of `expert_shared_feed_forward_length` scaled by sigmoid(w . h)
// (qwen2moe); kUngated: `expert_shared_count` experts' width as one plain SwiGLU FFN added
// to the routed sum (glm4moe, deepseek2).
enum class SharedExpert { kNone, kGated, kUngated };

struct ArchInfo {
  Arch arch;
  std::string_view name;          // general.architecture
  RopeStyle rope;
  QkNorm qk_norm;
  bool renormalize_topk;          // divide the k routing weights by their sum (default of the key)
  SharedExpert shared_expert;
  bool qkv_bias;                  // attn_q/k/v carry biases (qwen2moe)
  bool expert_ff_key;             // width in `{arch}.expert_feed_forward_length` (else feed_forward_length)
  bool output_may_be_tied;        // output.weight optional (falls back to token_embd)
  // glm4moe / deepseek2 style: the routing keys (gating func, expert_weights_norm / scale,
  // exp_probs_b selection bias), leading dense blocks and NextN layers are read from the file.
  bool routing_keys = false;
  ExpertGating gating = ExpertGating::kSoftmax;  // when the file does not say
  const char* ffn_norm = "ffn_norm";             // the pre-FFN norm's tensor name
  // gpt-oss: per-head attention sinks, sliding-window layers, attn_output / router / expert
  // biases, and the clamped SwiGLU (min(g, 7) * sigmoid(1.702 g') * (clamp(u, -7, 7) + 1)).
  bool oai = false;
  // qwen3next / qwen35moe: Gated DeltaNet layers (a recurrent state, no KV rows) between
  // gated full-attention layers (attn_q holds each head's query and its sigmoid gate);
  // NextN (MTP) blocks may follow the main stack.
  bool linear_attention = false;
};

const ArchInfo& arch_info(Arch arch);
std::optional<Arch> arch_from_name(std::string_view name);
std::span<const ArchInfo> all_archs();

}  // namespace mt
