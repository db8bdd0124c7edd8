#include "model/arch.h"

#include <array>

namespace mt {
namespace {

constexpr std::array kArchs = {
    //       arch             name        rope               qk norm            renorm shared                 bias  ff_key tied
    ArchInfo{Arch::kQwen3Moe, "qwen3moe", RopeStyle::kNeox, QkNorm::kPerHead,   true,  SharedExpert::kNone,   false, true,  true},
    ArchInfo{Arch::kQwen2Moe, "qwen2moe", RopeStyle::kNeox, QkNorm::kNone,      false, SharedExpert::kGated,  true,  true,  false},
    ArchInfo{Arch::kLlama,    "llama",    RopeStyle::kNorm, QkNorm::kNone,      true,  SharedExpert::kNone,   false, false, true},
    ArchInfo{Arch::kOlmoe,    "olmoe",    RopeStyle::kNeox, QkNorm::kFullWidth, false, SharedExpert::kNone,   false, false, false},
    // GLM-4.5 / 4.6 / Air: partial NEOX RoPE (rope.dimension_count), sigmoid routing with the
    // exp_probs_b selection bias, leading dense blocks, a trailing NextN layer.
    ArchInfo{Arch::kGlm4Moe,  "glm4moe",  RopeStyle::kNeox, QkNorm::kPerHeadOptional, false, SharedExpert::kUngated, true, true, true,
             true, ExpertGating::kSigmoid, "post_attention_norm"},
    // DeepSeek-V2 / V2-Lite / V3 / R1 (MLA layout): latent attention, NORM RoPE on the
    // rope part; softmax (V2) or sigmoid + exp_probs_b + groups (V3) routing from the keys.
    ArchInfo{Arch::kDeepseek2, "deepseek2", RopeStyle::kNorm, QkNorm::kNone, false, SharedExpert::kUngated, false, true, true,
             true, ExpertGating::kSoftmax, "ffn_norm"},
    // gpt-oss-20b / 120b (llama.cpp's OPENAI_MOE): sinks, alternating sliding-window layers,
    // biases everywhere, softmax over the selected logits, the clamped SwiGLU.
    ArchInfo{Arch::kGptOss, "gpt-oss", RopeStyle::kNeox, QkNorm::kNone, false, SharedExpert::kNone, true, true, false,
             false, ExpertGating::kSoftmaxOfSelected, "post_attention_norm", true},
    // poolside Laguna XS.2 / S.2 / M.1: per-layer query-head counts, full + sliding-window
    // layers (full first, period 4) with their own RoPE dims and base, a softplus gate on
    // the attention output; sigmoid routing with exp_probs_b, dense lead, one shared expert.
    ArchInfo{Arch::kLaguna, "laguna", RopeStyle::kNeox, QkNorm::kPerHead, false, SharedExpert::kUngated, false, true, true,
             true, ExpertGating::kSigmoid, "ffn_norm"},
    // Qwen3-Next / Qwen3.5-MoE (../shared/reference/moe_arch_facts_hybrid.md §1): three Gated
    // DeltaNet layers per gated full-attention layer, partial NEOX RoPE (qwen35moe's IMROPE
    // is the same for text), softmax routing renormalised, a sigmoid-gated shared expert.
    ArchInfo{Arch::kQwen3Next, "qwen3next", RopeStyle::kNeox, QkNorm::kPerHead, true, SharedExpert::kGated, false, true, true,
             false, ExpertGating::kSoftmax, "post_attention_norm", false, true},
    ArchInfo{Arch::kQwen35Moe, "qwen35moe", RopeStyle::kNeox, QkNorm::kPerHead, true, SharedExpert::kGated, false, true, true,
             false, ExpertGating::kSoftmax, "post_attention_norm", false, true},
};

}  // namespace

const ArchInfo& arch_info(Arch arch) { return kArchs[static_cast<size_t>(arch)]; }

std::optional<Arch> arch_from_name(std::string_view name) {
  for (const ArchInfo& a : kArchs) {
    if (a.name == name) return a.arch;
  }
  return std::nullopt;
}

std::span<const ArchInfo> all_archs() { return kArchs; }

}  // namespace mt
