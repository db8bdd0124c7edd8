// The quantized block layouts of GGUF tensors, one struct per ggml type, plus the small
// value tables their codes index.
//
// Invariant: each struct is byte-for-byte the on-disk block (little-endian, no padding;
// the static_asserts pin the sizes to the traits table in quant/types.cpp). `half`
// fields hold IEEE binary16 bits (quant/fp16.h). A row of n elements of a type is
// exactly n / QK consecutive blocks (QK = the struct's kElems). Structs keep their natural alignment (at most 2,
// Q8_K: 4); every block size is a multiple of it, so a row that starts aligned keeps
// all its blocks aligned. Field names and element orders follow
// shared/reference/quant_formats.md.
#pragma once

#include <cstdint>

namespace mt {

using half_bits = uint16_t;  // IEEE binary16 bits

inline constexpr int kQK32 = 32;   // block size of the 32-element formats
inline constexpr int kQKK = 256;   // super-block size of the K-quants and IQ4_XS

// Q4_0: value = (nibble - 8) * d. Byte j: element j low nibble, j + 16 high nibble.
struct BlockQ4_0 {
  static constexpr int kElems = kQK32;
  half_bits d;
  uint8_t qs[kQK32 / 2];
};

// Q4_1: value = nibble * d + m (nibble layout as Q4_0).
struct BlockQ4_1 {
  static constexpr int kElems = kQK32;
  half_bits d;
  half_bits m;
  uint8_t qs[kQK32 / 2];
};

// Q5_0: 5-bit code = nibble | (bit j of qh as little-endian uint32) << 4; value = (code - 16) * d.
struct BlockQ5_0 {
  static constexpr int kElems = kQK32;
  half_bits d;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};

// Q5_1: codes as Q5_0; value = code * d + m.
struct BlockQ5_1 {
  static constexpr int kElems = kQK32;
  half_bits d;
  half_bits m;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};

// Q8_0: value = qs[j] * d (sequential).
struct BlockQ8_0 {
  static constexpr int kElems = kQK32;
  half_bits d;
  int8_t qs[kQK32];
};

// Q8_1: value = qs[j] * d; s = d * sum(qs).
struct BlockQ8_1 {
  static constexpr int kElems = kQK32;
  half_bits d;
  half_bits s;
  int8_t qs[kQK32];
};

// Q2_K: 16 sub-blocks of 16; scales[i] = scale (low nibble, x d) | min (high, x dmin).
struct BlockQ2_K {
  static constexpr int kElems = kQKK;
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  half_bits d;
  half_bits dmin;
};

// Q3_K: 2 low bits in qs, high bit in hmask (set = non-negative), 16 6-bit scales.
struct BlockQ3_K {
  static constexpr int kElems = kQKK;
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  half_bits d;
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min packed in 12 bytes.
struct BlockQ4_K {
  static constexpr int kElems = kQKK;
  half_bits d;
  half_bits dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};

// Q5_K: Q4_K plus a fifth bit per element in qh.
struct BlockQ5_K {
  static constexpr int kElems = kQKK;
  half_bits d;
  half_bits dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Q6_K: 4 low bits in ql, 2 high bits in qh, 16 signed 8-bit scales; q = code - 32.
struct BlockQ6_K {
  static constexpr int kElems = kQKK;
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  half_bits d;
};

// Q8_K: float32 scale, 256 int8 quants, sums of each run of 16 quants.
struct BlockQ8_K {
  static constexpr int kElems = kQKK;
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// IQ4_NL: value = d * kIq4Values[nibble] (nibble layout as Q4_0).
struct BlockIQ4_NL {
  static constexpr int kElems = kQK32;
  half_bits d;
  uint8_t qs[kQK32 / 2];
};

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in
// scales_h); value = d * (ls - 32) * kIq4Values[nibble].
struct BlockIQ4_XS {
  static constexpr int kElems = kQKK;
  half_bits d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

// MXFP4: E8M0 exponent e, 32 FP4 (E2M1) codes; value = kFp4x2Values[nibble] * 2^(e - 128).
struct BlockMXFP4 {
  static constexpr int kElems = kQK32;
  uint8_t e;
  uint8_t qs[kQK32 / 2];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

// Non-linear 4-bit codebook shared by IQ4_NL and IQ4_XS (index = code).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// FP4 E2M1 values doubled (index = code; bit 3 = sign), used with half the MX scale.
inline constexpr int8_t kFp4x2Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 exponent byte -> 2^(e - 128) as float32, i.e. half the MX scale 2^(e - 127).
// e = 0 and 1 give the float32 subnormals 2^-128 and 2^-127 exactly.
constexpr uint32_t e8m0_half_bits(uint8_t e) {
  return e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
}

// Q4_K / Q5_K: unpack the 6-bit scale and min of sub-block j (0..7) from 12 bytes.
constexpr void unpack_scale_min_k4(int j, const uint8_t* b, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = b[j] & 63;
    *min = b[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((b[j + 4] & 0xF) | ((b[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((b[j + 4] >> 4) | ((b[j] >> 6) << 4));
  }
}

// Q5_0 / Q5_1: the 32 fifth bits, qh read as one little-endian uint32.
constexpr uint32_t load_qh(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}
constexpr void store_qh(uint32_t bits, uint8_t* qh) {
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(bits >> (8 * i));
}

// Q3_K: the signed 6-bit scale of sub-block i (0..15) from 12 bytes, in -32..31.
constexpr int q3k_scale(int i, const uint8_t* b) {
  const int low = (b[i % 8] >> (4 * (i / 8))) & 0xF;
  const int high = (b[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace mt
