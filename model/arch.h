// The MoE architectures moetier knows, by their GGUF `general.architecture` name, with
// the per-architecture facts every layer above needs (routing math, RoPE style, which
// optional tensors exist). Source of the facts: ../shared/reference/moe_arch_facts.md.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace mt {

enum class Arch { kQwen3Moe, kQwen2Moe, kLlama, kOlmoe };

enum class RopeStyle { kNorm, kNeox };  // adjacent pairs vs halves
enum class QkNorm { kNone, kPerHead, kFullWidth };

struct ArchInfo {
  Arch arch;
  std::string_view name;          // general.architecture
  RopeStyle rope;
  QkNorm qk_norm;
  bool renormalize_topk;          // divide the k routing weights by their sum
  bool shared_expert;             // qwen2moe: one sigmoid-gated shared expert
  bool qkv_bias;                  // attn_q/k/v carry biases (qwen2moe)
  bool expert_ff_key;             // width in `{arch}.expert_feed_forward_length` (else feed_forward_length)
  bool output_may_be_tied;        // output.weight optional (falls back to token_embd)
};

const ArchInfo& arch_info(Arch arch);
std::optional<Arch> arch_from_name(std::string_view name);
std::span<const ArchInfo> all_archs();

}  // namespace mt
