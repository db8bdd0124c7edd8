// The scalar simple family: these loops define what every ISA's kernel computes.
//
// Quantized dots: per block the int32 sum of weight code x activation code, times
// float(d_w) * float(d_a) (Q4_1 / Q5_1: plus m_w * s_a), summed in float in block order.
// Float dots: products summed in float per run of 32 elements, the runs summed in float.
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
inline float load_f16(const void* row, int64_t i) { return fp16_to_fp32(load_u16(row, i)); }
inline float load_bf16(const void* row, int64_t i) { return bf16_to_fp32(load_u16(row, i)); }

template <float (*Load)(const void*, int64_t)>
float dot_float(int64_t n, const void* weight, const void* act) {
  float sum = 0.f;
  for (int64_t i0 = 0; i0 < n; i0 += 32) {
    const int64_t end = i0 + 32 < n ? i0 + 32 : n;
    float run = 0.f;
    for (int64_t i = i0; i < end; ++i) run += Load(weight, i) * Load(act, i);
    sum += run;
  }
  return sum;
}

template <QuantType kType>
void quantize_reference(const float* x, void* dst, int64_t n) {
  quantize_row(kType, x, dst, n);
}

void axpy_f16(int64_t n, float a, const void* x, float* y) {
  const auto* b = static_cast<const uint8_t*>(x);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, sizeof(h));
    y[i] += a * fp16_to_fp32(h);
  }
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
  set_dot(QuantType::F16, dot_float<load_f16>);
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
