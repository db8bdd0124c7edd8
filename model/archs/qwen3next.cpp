// qwen3next / qwen35moe (Qwen3-Next, Qwen3.5-MoE): Gated DeltaNet layers, and every
// full_attention_interval-th layer gated full attention (per-head q/k RMSNorm, partial NEOX
// RoPE, the attention output times sigmoid of the gate half of attn_q); every layer's FFN
// softmax-routed experts renormalised plus the sigmoid-gated shared expert, after
// post_attention_norm.
#include "model/archs/blocks.h"

namespace mt {

void qwen3next_block(const BlockArgs& a) {
  if (a.hp.is_recurrent(a.layer)) gated_delta_net_block(a);
  else attention_block(a, QkNorm::kPerHead, RopeStyle::kNeox);
  moe_block(a, moe_math(a.hp));
}

}  // namespace mt
