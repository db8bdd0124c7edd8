// Which quant type each tensor of a synthetic model gets, llama.cpp-style.
//
// Norms, biases and routers are always F32 (llama-quantize never touches them). The
// mix's base type goes to every other matrix; a `_m` mix gives ffn_down* and attn_v the
// higher type on the "more bits" layers (the first and last eighth of the stack and
// every third layer between) and the output matrix its own type. A type whose block does
// not divide the row length falls back like llama-quantize does (Q4_K -> Q5_0, ...).
#pragma once

#include <cstdint>

#include "synth/config.h"

namespace mt::synth {

enum class Role {
  kEmbedding, kOutput, kNorm, kBias, kRouter, kSharedGateInp,
  kAttnQ, kAttnK, kAttnV, kAttnOut,
  kExpGate, kExpUp, kExpDown,
  kShexpGate, kShexpUp, kShexpDown,
  kDenseGate, kDenseUp, kDenseDown,   // leading dense FFN blocks
  kExpProbsB,                         // the selection bias (F32)
  kNextnProj,                         // a NextN block's eh_proj
  kSsmConv,                           // a Gated DeltaNet conv kernel (F32, as the converter writes it)
};

bool use_more_bits(uint32_t layer, uint32_t n_layer);

// `layer` is ignored for non-block tensors; `ne0` is the row length.
QuantType choose_type(const SynthConfig& config, Role role, uint32_t layer, uint64_t ne0);

// The llama.cpp ftype number that best describes the mix (general.file_type).
uint32_t file_type_of(const QuantMix& mix);

}  // namespace mt::synth
