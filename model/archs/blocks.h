// One transformer block per architecture, each composed from the layer helpers
// (model/layers.h). `block_fn` (blocks.cpp) says which function runs which arch.
#pragma once

#include "model/layers.h"

namespace mt {

void qwen3moe_block(const BlockArgs& a);
void qwen2moe_block(const BlockArgs& a);
void llama_block(const BlockArgs& a);
void olmoe_block(const BlockArgs& a);
void glm4moe_block(const BlockArgs& a);
void deepseek2_block(const BlockArgs& a);
void gpt_oss_block(const BlockArgs& a);
void laguna_block(const BlockArgs& a);
void qwen3next_block(const BlockArgs& a);  // qwen35moe too

using BlockFn = void (*)(const BlockArgs&);
BlockFn block_fn(Arch arch);

}  // namespace mt
