#include "synth/tensor_types.h"

namespace mt::synth {
namespace {

bool fits(QuantType t, uint64_t ne0) { return ne0 % type_traits(t).block_elems == 0; }

// llama-quantize's fallback when a row is not a multiple of 256.
QuantType fallback(QuantType t, uint64_t ne0) {
  QuantType f = t;
  switch (t) {
    case QuantType::Q2_K: case QuantType::Q3_K: case QuantType::IQ4_XS: f = QuantType::IQ4_NL; break;
    case QuantType::Q4_K: f = QuantType::Q5_0; break;
    case QuantType::Q5_K: f = QuantType::Q5_1; break;
    case QuantType::Q6_K: f = QuantType::Q8_0; break;
    default: break;
  }
  return fits(f, ne0) ? f : QuantType::F16;
}

bool is_expert(Role r) { return r == Role::kExpGate || r == Role::kExpUp || r == Role::kExpDown; }

}  // namespace

bool use_more_bits(uint32_t layer, uint32_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 ||
         (layer >= n_layer / 8 && (layer - n_layer / 8) % 3 == 2);
}

QuantType choose_type(const SynthConfig& c, Role role, uint32_t layer, uint64_t ne0) {
  switch (role) {
    case Role::kNorm: case Role::kBias: case Role::kRouter: case Role::kSharedGateInp: case Role::kExpProbsB: case Role::kSsmConv:
      return QuantType::F32;
    default: break;
  }
  QuantType t = c.quant.base;
  if (role == Role::kOutput && c.quant.output) t = *c.quant.output;
  const bool down_or_v = role == Role::kExpDown || role == Role::kShexpDown || role == Role::kDenseDown || role == Role::kAttnV;
  if (down_or_v && c.quant.more_bits && use_more_bits(layer, c.n_layer)) t = *c.quant.more_bits;
  if (is_expert(role)) {
    for (const LayerTypeOverride& o : c.layer_types) {
      for (uint32_t l : o.layers) {
        if (l == layer) t = o.type;
      }
    }
  }
  return fits(t, ne0) ? t : fallback(t, ne0);
}

uint32_t file_type_of(const QuantMix& mix) {
  if (mix.name == "q4_k_m" || mix.name == "Q4_K_M") return 15;
  if (mix.name == "q5_k_m" || mix.name == "Q5_K_M") return 17;
  switch (mix.base) {
    case QuantType::F32: return 0;
    case QuantType::F16: return 1;
    case QuantType::Q4_0: return 2;
    case QuantType::Q4_1: return 3;
    case QuantType::Q8_0: return 7;
    case QuantType::Q5_0: return 8;
    case QuantType::Q5_1: return 9;
    case QuantType::Q2_K: return 10;
    case QuantType::Q3_K: return 12;
    case QuantType::Q4_K: return 14;
    case QuantType::Q5_K: return 16;
    case QuantType::Q6_K: return 18;
    case QuantType::IQ4_NL: return 25;
    case QuantType::IQ4_XS: return 30;
    case QuantType::BF16: return 32;
    case QuantType::MXFP4: return 38;
    default: return 1024;  // guessed
  }
}

}  // namespace mt::synth
