// gpt-oss (gpt-oss-20b / 120b; llama.cpp's OPENAI_MOE): Q/K/V and output biases, NEOX RoPE
// (the SWA layers with their own base), per-head attention sinks, every other layer a
// sliding window (model/hparams.h is_swa); post_attention_norm before the experts; the
// router's bias added to its logits, top-k on those logits and the weights a softmax over
// the k chosen; experts with biases and the clamped SwiGLU. No shared expert, no dense FFN.
#include "model/archs/blocks.h"

namespace mt {

void gpt_oss_block(const BlockArgs& a) {
  attention_block(a, QkNorm::kNone, RopeStyle::kNeox);
  moe_block(a, moe_math(a.hp));
}

}  // namespace mt
