// olmoe (OLMoE-1B-7B): RMSNorm over the whole projected Q and K vectors (not per head)
// before NEOX RoPE; softmax routing, top-8 of 64, not renormalised.
#include "model/archs/blocks.h"

namespace mt {

void olmoe_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kFullWidth, RopeStyle::kNeox);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
