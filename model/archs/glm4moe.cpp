// glm4moe (GLM-4.5, GLM-4.5-Air, GLM-4.6): Q/K/V biases, per-head q/k norms where the
// file has them, NEOX RoPE over the first rope.dimension_count dims of each head (half
// of them in the real checkpoints); post_attention_norm before the FFN; the leading
// dense blocks are SwiGLU FFNs, the rest sigmoid-routed experts with the exp_probs_b
// selection bias (renormalised and scaled as the keys say) plus ungated shared experts.
// The trailing NextN layer runs only as --mtp's drafter (model/nextn.cpp).
#include "model/archs/blocks.h"

namespace mt {

void glm4moe_block(const BlockArgs& a) {
  attention_block(a, a.w.q_norm.present() ? QkNorm::kPerHead : QkNorm::kNone, RopeStyle::kNeox);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
