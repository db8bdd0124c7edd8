// qwen2moe (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Q/K/V biases, NEOX RoPE; softmax
// routing without renormalisation, plus a shared expert scaled by sigmoid(w . h).
#include "model/archs/blocks.h"

namespace mt {

void qwen2moe_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kNone, RopeStyle::kNeox);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
