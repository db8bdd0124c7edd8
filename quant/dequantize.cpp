// Reference dequantizers: one function per block type, bit-exact with ggml's
// dequantize_row_<type> (float32, one rounding per operation, the documented order;
// this file is compiled with -ffp-contract=off so a * b - c never becomes an FMA).
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt {
namespace {

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);

void dequantize_block(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

void dequantize_block(const BlockQ4_1& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float m = fp16_to_fp32(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b.qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
  }
}

void dequantize_block(const BlockQ5_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const uint32_t qh = load_qh(b.qh);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

void dequantize_block(const BlockQ5_1& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float m = fp16_to_fp32(b.m);
  const uint32_t qh = load_qh(b.qh);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

void dequantize_block(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void dequantize_block(const BlockQ8_1& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void dequantize_block(const BlockQ2_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  int is = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int grp = 0; grp < 2; ++grp) {
        const uint8_t sc = b.scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * grp + l] >> shift) & 3) - ml;
      }
    }
  }
}

void dequantize_block(const BlockQ3_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  int is = 0;
  uint8_t mask = 1;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int grp = 0; grp < 2; ++grp) {
        const float dl = d * static_cast<float>(q3k_scale(is++, b.scales));
        for (int l = 0; l < 16; ++l) {
          const int q2 = (q[16 * grp + l] >> shift) & 3;
          const int v = q2 - ((b.hmask[16 * grp + l] & mask) != 0 ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      mask = static_cast<uint8_t>(mask << 1);
    }
  }
}

void dequantize_block(const BlockQ4_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    uint8_t sc = 0, m = 0;
    unpack_scale_min_k4(2 * c, b.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    unpack_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void dequantize_block(const BlockQ5_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * c));
    const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * c));
    uint8_t sc = 0, m = 0;
    unpack_scale_min_k4(2 * c, b.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    unpack_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] & 0xF) + ((b.qh[l] & bit_lo) != 0 ? 16 : 0);
      *y++ = d1 * static_cast<float>(v) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] >> 4) + ((b.qh[l] & bit_hi) != 0 ? 16 : 0);
      *y++ = d2 * static_cast<float>(v) - m2;
    }
  }
}

void dequantize_block(const BlockQ6_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    const int8_t* sc = b.scales + 8 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
  }
}

void dequantize_block(const BlockQ8_K& b, float* y) {
  for (int j = 0; j < kQKK; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
}

void dequantize_block(const BlockIQ4_NL& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[b.qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[b.qs[j] >> 4]);
  }
}

void dequantize_block(const BlockIQ4_XS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < kQKK / 32; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    const uint8_t* qs = b.qs + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4Values[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIq4Values[qs[j] >> 4]);
    }
    y += 32;
  }
}

void dequantize_block(const BlockMXFP4& b, float* y) {
  const float d = std::bit_cast<float>(e8m0_half_bits(b.e));
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kFp4x2Values[b.qs[j] & 0xF]) * d;
    y[j + 16] = static_cast<float>(kFp4x2Values[b.qs[j] >> 4]) * d;
  }
}

// The runtime type has become the template parameter: the loop below is per type.
template <typename Block>
void dequantize_blocks(const void* src, float* dst, int64_t n) {
  MT_CHECK(reinterpret_cast<uintptr_t>(src) % alignof(Block) == 0);
  const auto* blocks = static_cast<const Block*>(src);
  const int64_t nb = n / Block::kElems;
  for (int64_t i = 0; i < nb; ++i) dequantize_block(blocks[i], dst + i * Block::kElems);
}

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// F16 / BF16 rows are read bytewise (no alignment requirement).
template <float (*Widen)(uint16_t)>
void dequantize_16bit(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    const auto bits = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    dst[i] = Widen(bits);
  }
}

DequantizeFn find_dequantizer(QuantType type) {
  switch (type) {
    case QuantType::F32: return dequantize_f32;
    case QuantType::F16: return dequantize_16bit<fp16_to_fp32>;
    case QuantType::BF16: return dequantize_16bit<bf16_to_fp32>;
    case QuantType::Q4_0: return dequantize_blocks<BlockQ4_0>;
    case QuantType::Q4_1: return dequantize_blocks<BlockQ4_1>;
    case QuantType::Q5_0: return dequantize_blocks<BlockQ5_0>;
    case QuantType::Q5_1: return dequantize_blocks<BlockQ5_1>;
    case QuantType::Q8_0: return dequantize_blocks<BlockQ8_0>;
    case QuantType::Q8_1: return dequantize_blocks<BlockQ8_1>;
    case QuantType::Q2_K: return dequantize_blocks<BlockQ2_K>;
    case QuantType::Q3_K: return dequantize_blocks<BlockQ3_K>;
    case QuantType::Q4_K: return dequantize_blocks<BlockQ4_K>;
    case QuantType::Q5_K: return dequantize_blocks<BlockQ5_K>;
    case QuantType::Q6_K: return dequantize_blocks<BlockQ6_K>;
    case QuantType::Q8_K: return dequantize_blocks<BlockQ8_K>;
    case QuantType::IQ4_NL: return dequantize_blocks<BlockIQ4_NL>;
    case QuantType::IQ4_XS: return dequantize_blocks<BlockIQ4_XS>;
    case QuantType::MXFP4: return dequantize_blocks<BlockMXFP4>;
    default: return nullptr;
  }
}

}  // namespace

bool has_dequantize(QuantType type) { return find_dequantizer(type) != nullptr; }

void dequantize_row(QuantType type, const void* src, float* dst, int64_t n) {
  const DequantizeFn fn = find_dequantizer(type);
  MT_CHECK_MSG(fn != nullptr, "no reference dequantizer for this type");
  MT_CHECK(n >= 0 && n % type_traits(type).block_elems == 0);
  if (n == 0) return;
  fn(src, dst, n);
}

}  // namespace mt
