#include "model/archs/blocks.h"

namespace mt {

BlockFn block_fn(Arch arch) {
  switch (arch) {
    case Arch::kQwen3Moe: return qwen3moe_block;
    case Arch::kQwen2Moe: return qwen2moe_block;
    case Arch::kLlama: return llama_block;
    case Arch::kOlmoe: return olmoe_block;
    case Arch::kGlm4Moe: return glm4moe_block;
    case Arch::kDeepseek2: return deepseek2_block;
    case Arch::kGptOss: return gpt_oss_block;
    case Arch::kLaguna: return laguna_block;
    case Arch::kQwen3Next:
    case Arch::kQwen35Moe: return qwen3next_block;
  }
  return nullptr;
}

}  // namespace mt
