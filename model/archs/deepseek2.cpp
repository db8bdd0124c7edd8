// deepseek2 (DeepSeek-V2, V2-Lite, V3, R1 in the MLA layout): multi-head latent attention
// (model/attention_mla.cpp); the leading dense blocks are SwiGLU FFNs, the rest routed
// experts with the keys' math (V2: softmax; V3: sigmoid + exp_probs_b + expert groups,
// renormalised and scaled) plus ungated shared experts.
#include "model/archs/blocks.h"

namespace mt {

void deepseek2_block(const BlockArgs& a) {
  mla_attention_block(a);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
