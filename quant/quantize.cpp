// quantize_row: the runtime type is turned into a per-block-type loop once, here.
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "quant/fp16.h"
#include "quant/quantize_util.h"
#include "quant/reference.h"

namespace mt {
namespace {

using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

template <typename Block>
void quantize_blocks(const float* src, void* dst, int64_t n) {
  MT_CHECK(reinterpret_cast<uintptr_t>(dst) % alignof(Block) == 0);
  auto* blocks = static_cast<Block*>(dst);
  const int64_t nb = n / Block::kElems;
  for (int64_t i = 0; i < nb; ++i) quant_internal::quantize_block(src + i * Block::kElems, &blocks[i]);
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// F16 / BF16 rows are written bytewise, little-endian (no alignment requirement).
template <uint16_t (*Narrow)(float)>
void quantize_16bit(const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = Narrow(src[i]);
    bytes[2 * i] = static_cast<uint8_t>(bits & 0xFF);
    bytes[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
  }
}

QuantizeFn find_quantizer(QuantType type) {
  switch (type) {
    case QuantType::F32: return quantize_f32;
    case QuantType::F16: return quantize_16bit<fp32_to_fp16>;
    case QuantType::BF16: return quantize_16bit<fp32_to_bf16>;
    case QuantType::Q4_0: return quantize_blocks<BlockQ4_0>;
    case QuantType::Q4_1: return quantize_blocks<BlockQ4_1>;
    case QuantType::Q5_0: return quantize_blocks<BlockQ5_0>;
    case QuantType::Q5_1: return quantize_blocks<BlockQ5_1>;
    case QuantType::Q8_0: return quantize_blocks<BlockQ8_0>;
    case QuantType::Q8_1: return quantize_blocks<BlockQ8_1>;
    case QuantType::Q2_K: return quantize_blocks<BlockQ2_K>;
    case QuantType::Q3_K: return quantize_blocks<BlockQ3_K>;
    case QuantType::Q4_K: return quantize_blocks<BlockQ4_K>;
    case QuantType::Q5_K: return quantize_blocks<BlockQ5_K>;
    case QuantType::Q6_K: return quantize_blocks<BlockQ6_K>;
    case QuantType::Q8_K: return quantize_blocks<BlockQ8_K>;
    case QuantType::IQ4_NL: return quantize_blocks<BlockIQ4_NL>;
    case QuantType::IQ4_XS: return quantize_blocks<BlockIQ4_XS>;
    case QuantType::MXFP4: return quantize_blocks<BlockMXFP4>;
    default: return nullptr;
  }
}

}  // namespace

bool has_quantize(QuantType type) { return find_quantizer(type) != nullptr; }

void quantize_row(QuantType type, const float* src, void* dst, int64_t n) {
  const QuantizeFn fn = find_quantizer(type);
  MT_CHECK_MSG(fn != nullptr, "no reference quantizer for this type");
  MT_CHECK(n >= 0 && n % type_traits(type).block_elems == 0);
  if (n == 0) return;
  fn(src, dst, n);
}

}  // namespace mt
