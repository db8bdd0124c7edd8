// The scalar simple family: these loops define what every ISA's kernel computes.
//
// Quantized dots: per block the int32 sum of weight code x activation code, times
// float(d_w) * float(d_a) (Q4_1 / Q5_1: plus m_w * s_a), summed in float in block order.
// Float dots: products summed in eight float lanes (element i in lane i % 8), the lanes
// summed, then the tail.
// Activation quantizers are quant/'s reference quantizers themselves.
#include <bit>
#include <cstdint>
#include <cstring>

#include "cpu/register.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt::cpu {
namespace {

// ---- weight codes: a block's 32 elements as the signed integers its dot multiplies

void nibbles(const uint8_t* qs, int offset, int8_t* c) {
  for (int j = 0; j < 16; ++j) {
    c[j] = static_cast<int8_t>((qs[j] & 0xF) - offset);
    c[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}
void fifth_bits(const uint8_t* qh, int8_t* c) {
  const uint32_t h = load_qh(qh);
  for (int j = 0; j < kQK32; ++j) c[j] = static_cast<int8_t>(c[j] + static_cast<int>(((h >> j) & 1u) << 4));
}
void lookup(const uint8_t* qs, const int8_t* table, int8_t* c) {
  for (int j = 0; j < 16; ++j) {
    c[j] = table[qs[j] & 0xF];
    c[j + 16] = table[qs[j] >> 4];
  }
}

void codes(const BlockQ4_0& b, int8_t* c) { nibbles(b.qs, 8, c); }
void codes(const BlockQ4_1& b, int8_t* c) { nibbles(b.qs, 0, c); }
void codes(const BlockQ5_0& b, int8_t* c) {
  nibbles(b.qs, 16, c);
  fifth_bits(b.qh, c);
}
void codes(const BlockQ5_1& b, int8_t* c) {
  nibbles(b.qs, 0, c);
  fifth_bits(b.qh, c);
}
void codes(const BlockQ8_0& b, int8_t* c) {
  for (int j = 0; j < kQK32; ++j) c[j] = b.qs[j];
}
void codes(const BlockIQ4_NL& b, int8_t* c) { lookup(b.qs, kIq4Values, c); }
void codes(const BlockMXFP4& b, int8_t* c) { lookup(b.qs, kFp4x2Values, c); }

// ---- block scales

inline float scale(const BlockQ4_0& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockQ4_1& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockQ5_0& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockQ5_1& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockQ8_0& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockIQ4_NL& b) { return fp16_to_fp32(b.d); }
inline float scale(const BlockMXFP4& b) { return std::bit_cast<float>(e8m0_half_bits(b.e)); }

template <typename W>
constexpr bool kHasMin = requires(const W& w) { w.m; };

// (n / 32 weight blocks of W) . (n / 32 activation blocks of A: Q8_0 or Q8_1)
template <typename W, typename A>
float dot_blocks(int64_t n, const void* weight, const void* act) {
  const auto* w = static_cast<const W*>(weight);
  const auto* a = static_cast<const A*>(act);
  const int64_t nb = n / kQK32;
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t c[kQK32];
    codes(w[i], c);
    int32_t sumi = 0;
    for (int j = 0; j < kQK32; ++j) sumi += c[j] * a[i].qs[j];
    float block = static_cast<float>(sumi) * (scale(w[i]) * fp16_to_fp32(a[i].d));
    if constexpr (kHasMin<W>) block += fp16_to_fp32(w[i].m) * fp16_to_fp32(a[i].s);
    sum += block;
  }
  return sum;
}

// ---- float rows (F16 / BF16 little-endian, any alignment)

inline float load_f32(const void* row, int64_t i) { return static_cast<const float*>(row)[i]; }
inline uint16_t load_u16(const void* row, int64_t i) {
  const auto* b = static_cast<const uint8_t*>(row) + 2 * i;
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}
// fp16_to_fp32 without branches: the three cases (zero or subnormal, inf or NaN, normal)
// computed side by side and selected by masks, four halves at a time in the compiler's
// generic vectors (SSE2 on baseline x86-64, NEON on arm64; no ISA flags), for the F16 dot
// and axpy. fp16_to_fp32's branches, one half at a time, ran the output matrix of an F16
// model 10x slower at this level. Exact: tests/unit/cpu_simple_test.cpp checks all 65536
// values against fp16_to_fp32.
static_assert(std::endian::native == std::endian::little, "F16 rows are read as little-endian words");
using U16x4 = uint16_t __attribute__((vector_size(8)));
using U32x4 = uint32_t __attribute__((vector_size(16)));
using I32x4 = int32_t __attribute__((vector_size(16)));
using F32x4 = float __attribute__((vector_size(16)));

inline F32x4 widen_f16x4(const void* row, int64_t i) {
  U16x4 halves;
  std::memcpy(&halves, static_cast<const uint8_t*>(row) + 2 * i, sizeof(halves));
  const U32x4 h = __builtin_convertvector(halves, U32x4);
  const U32x4 sign = (h & 0x8000u) << 16;
  const U32x4 exp = (h >> 10) & 0x1fu;
  const U32x4 mant = h & 0x3ffu;
  const U32x4 normal = ((exp + 112u) << 23) | (mant << 13);
  const U32x4 inf_or_nan = 0x7f800000u | (mant << 13);
  const F32x4 subnormal_value = __builtin_convertvector((I32x4)mant, F32x4) * 0x1p-24f;  // mant * 2^-24, exact
  U32x4 subnormal;
  std::memcpy(&subnormal, &subnormal_value, sizeof(subnormal));
  const auto exp_zero = (U32x4)(exp == 0u);
  const auto exp_top = (U32x4)(exp == 0x1fu);
  const U32x4 not_subnormal = (inf_or_nan & exp_top) | (normal & ~exp_top);
  const U32x4 bits = sign | (subnormal & exp_zero) | (not_subnormal & ~exp_zero);
  F32x4 out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}
inline float load_f16(const void* row, int64_t i) { return fp16_to_fp32(load_u16(row, i)); }
inline float load_bf16(const void* row, int64_t i) { return bf16_to_fp32(load_u16(row, i)); }

// Eight independent lanes (element i of the whole eights in lane i % 8), so the compiler
// may keep them in vector registers: one chain of adds ran the 151936-row output matrix of
// the server tests' model at one multiply-add per 4 cycles.
template <float (*Load)(const void*, int64_t)>
float dot_float(int64_t n, const void* weight, const void* act) {
  float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += Load(weight, i + j) * Load(act, i + j);
  }
  float sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; i < n; ++i) sum += Load(weight, i) * Load(act, i);
  return sum;
}

// dot_float's order (element i of the whole eights in lane i % 8: `low` holds lanes 0-3,
// `high` lanes 4-7), with the halves widened four at a time.
float dot_f16(int64_t n, const void* weight, const void* act) {
  F32x4 low = {0.f, 0.f, 0.f, 0.f};
  F32x4 high = {0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    low += widen_f16x4(weight, i) * widen_f16x4(act, i);
    high += widen_f16x4(weight, i + 4) * widen_f16x4(act, i + 4);
  }
  float sum = ((low[0] + high[0]) + (low[1] + high[1])) + ((low[2] + high[2]) + (low[3] + high[3]));
  for (; i < n; ++i) sum += load_f16(weight, i) * load_f16(act, i);
  return sum;
}

template <QuantType kType>
void quantize_reference(const float* x, void* dst, int64_t n) {
  quantize_row(kType, x, dst, n);
}

void axpy_f16(int64_t n, float a, const void* x, float* y) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F32x4 sum;
    std::memcpy(&sum, y + i, sizeof(sum));
    sum += a * widen_f16x4(x, i);
    std::memcpy(y + i, &sum, sizeof(sum));
  }
  for (; i < n; ++i) y[i] += a * load_f16(x, i);
}

}  // namespace

void register_simple_scalar(KernelTable& t) {
  t.axpy_f16 = axpy_f16;
  auto set_dot = [&t](QuantType type, VecDotFn fn) { t.vec_dot[static_cast<int>(type)] = fn; };
  auto set_quantize = [&t](QuantType type, QuantizeRowFn fn) { t.quantize[static_cast<int>(type)] = fn; };

  set_quantize(QuantType::Q8_0, quantize_reference<QuantType::Q8_0>);
  set_quantize(QuantType::Q8_1, quantize_reference<QuantType::Q8_1>);
  set_quantize(QuantType::Q8_K, quantize_reference<QuantType::Q8_K>);
  set_quantize(QuantType::F16, quantize_reference<QuantType::F16>);
  set_quantize(QuantType::BF16, quantize_reference<QuantType::BF16>);
  set_quantize(QuantType::F32, quantize_reference<QuantType::F32>);

  set_dot(QuantType::F32, dot_float<load_f32>);
  set_dot(QuantType::F16, dot_f16);
  set_dot(QuantType::BF16, dot_float<load_bf16>);
  set_dot(QuantType::Q4_0, dot_blocks<BlockQ4_0, BlockQ8_0>);
  set_dot(QuantType::Q4_1, dot_blocks<BlockQ4_1, BlockQ8_1>);
  set_dot(QuantType::Q5_0, dot_blocks<BlockQ5_0, BlockQ8_0>);
  set_dot(QuantType::Q5_1, dot_blocks<BlockQ5_1, BlockQ8_1>);
  set_dot(QuantType::Q8_0, dot_blocks<BlockQ8_0, BlockQ8_0>);
  set_dot(QuantType::IQ4_NL, dot_blocks<BlockIQ4_NL, BlockQ8_0>);
  set_dot(QuantType::MXFP4, dot_blocks<BlockMXFP4, BlockQ8_0>);
}

}  // namespace mt::cpu
