// llama (Mixtral 8x7B/8x22B, and dense Llama): NORM (adjacent-pair) RoPE; softmax
// routing with the top-k renormalised (= softmax over the k best logits); experts may be
// ungated; a layer without a router is a dense SwiGLU FFN.
#include "model/archs/blocks.h"

namespace mt {

void llama_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kNone, RopeStyle::kNorm);
  if (a.w.is_moe()) moe_block(a, moe_math(a.hp));
  else dense_ffn_block(a);
}

}  // namespace mt
