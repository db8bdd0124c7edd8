// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head RMSNorm on Q and K before NEOX
// RoPE; softmax routing, top-k renormalised; no shared expert.
#include "model/archs/blocks.h"

namespace mt {

void qwen3moe_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kPerHead, RopeStyle::kNeox);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
