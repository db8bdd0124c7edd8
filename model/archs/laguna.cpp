// laguna (poolside Laguna XS.2 / S.2 / M.1): per-layer query-head counts; per-head q/k
// RMSNorm before NEOX RoPE, whose dims and base differ on the sliding-window layers
// (HParams::for_layer); the attention output times softplus(attn_gate . h) before
// attn_output; dense leading blocks, then sigmoid routing with the exp_probs_b selection
// bias (renormalised and scaled as the keys say) plus one ungated shared expert.
#include "model/archs/blocks.h"

namespace mt {

void laguna_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kPerHead, RopeStyle::kNeox);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
