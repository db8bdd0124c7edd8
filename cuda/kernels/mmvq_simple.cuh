// MMVQ per-task dot products of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL, MXFP4): one task is one block against one 32-element activation block (Q8_0;
// Q8_1 for Q4_1 / Q5_1: the same quants and d, cuda/kernels/mmvq_kernels.h).
//
// The arithmetic is cpu/simple_scalar.cpp's: per block the int32 sum of weight code x
// activation quant, times float(d_w) * float(d_a), plus m_w * s_a for Q4_1 / Q5_1 with
// s_a = float(fp16(d_a * sum of the block's quants)) (act_s).
// Codes are built four at a time in a word (nibbles masked out; the fifth bits of Q5_x
// spread into bit 4 of each byte; offsets removed per byte; the non-linear tables looked
// up with byte permutes) and dotted with __dp4a. Field offsets follow quant/blocks.h.
#pragma once

#include "cuda/kernels/mmvq_common.cuh"
#include "quant/blocks.h"

namespace mt::cuda::mmvq_detail {

struct Iq4Table {
  static constexpr uint32_t w0 = pack4(kIq4Values, 0), w1 = pack4(kIq4Values, 4), w2 = pack4(kIq4Values, 8),
                            w3 = pack4(kIq4Values, 12);
};
struct Fp4Table {
  static constexpr uint32_t w0 = pack4(kFp4x2Values, 0), w1 = pack4(kFp4x2Values, 4),
                            w2 = pack4(kFp4x2Values, 8), w3 = pack4(kFp4x2Values, 12);
};

// Bits 0..3 of b to bit 4 of bytes 0..3 (the Q5_0 / Q5_1 fifth bits of four elements):
// the multiply places copies of b at bits 0, 7, 14 and 21 (no two set bits meet, so no
// carries), putting bit k of b at bit 8k.
MT_HD uint32_t spread4(uint32_t b) { return (((b & 0xFu) * 0x00204081u) & 0x01010101u) << 4; }

template <int kOffset>  // code = nibble - kOffset
MT_HD void nibble_codes(const uint32_t (&w)[4], uint32_t (&c)[8]) {
  split_nibbles(w, c);
  if constexpr (kOffset != 0) {
    for (int i = 0; i < 8; ++i) c[i] = vsub4(c[i], kOffset * 0x01010101u);
  }
}

// code = (nibble | fifth bit << 4) - kOffset; h = the 32 fifth bits (bit j: element j).
template <int kOffset>
MT_HD void five_bit_codes(const uint32_t (&w)[4], uint32_t h, uint32_t (&c)[8]) {
  split_nibbles(w, c);
  for (int i = 0; i < 4; ++i) {
    c[i] |= spread4(h >> (4 * i));
    c[4 + i] |= spread4(h >> (16 + 4 * i));
  }
  if constexpr (kOffset != 0) {
    for (int i = 0; i < 8; ++i) c[i] = vsub4(c[i], kOffset * 0x01010101u);
  }
}

// N words of nibbles (Q4_0 layout, 32 elements per 4 words) -> 2N words of table values:
// block b = words 4b..4b+3 gives c[8b..8b+3] (low nibbles) and c[8b+4..8b+7] (high).
template <class Table, int N>
MT_HD void table_codes(const uint32_t (&w)[N], uint32_t (&c)[2 * N]) {
  for (int i = 0; i < N; ++i) lookup_word<Table>(w[i], c[(i / 4) * 8 + i % 4], c[(i / 4) * 8 + 4 + i % 4]);
}

// What every 32-element type shares: its codes against one activation block.
template <bool kMin>
struct Simple32 {
  static constexpr int kElems = 32, kTasks = 1;
  struct Codes {
    uint32_t c[8];  // elements 4i..4i+3 in word i
    float d, m;     // m: Q4_1 / Q5_1 only
  };
  struct Act {
    uint32_t a[8];
    float d, s;  // s: Q4_1 / Q5_1 only
  };
  MT_HD static Act load(const ActRow& x, int q0, int) {
    Act r;
    act_words<8>(x, 32 * q0, r.a);
    if constexpr (kMin) {
      const ActMeta m = act_meta(x, q0);
      r.d = m.d;
      r.s = act_s(m.d, m.sum_lo + m.sum_hi);
    } else {
      r.d = act_d(x, q0);
      r.s = 0.f;
    }
    return r;
  }
  MT_HD static float dot(const Codes& c, const Act& a) {
    float block = static_cast<float>(dot_words<8>(c.c, a.a)) * (c.d * a.d);
    if constexpr (kMin) block += c.m * a.s;
    return block;
  }
};

template <>
struct MmvqType<BlockQ4_0> : Simple32<false> {  // d@0 qs@2
  static constexpr int kBytes = sizeof(BlockQ4_0), kAlign = 2;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4];
    ld_words<4, align_at(A, 2)>(b + 2, w);
    nibble_codes<8>(w, r.c);
    r.d = h2f(ld_u16<A>(b));
    r.m = 0.f;
    return r;
  }
};

template <>
struct MmvqType<BlockQ4_1> : Simple32<true> {  // d@0 m@2 qs@4
  static constexpr int kBytes = sizeof(BlockQ4_1), kAlign = 4;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4], dm[1];
    ld_words<4, align_at(A, 4)>(b + 4, w);
    ld_words<1, A>(b, dm);
    nibble_codes<0>(w, r.c);
    r.d = h2f(dm[0]);
    r.m = h2f(dm[0] >> 16);
    return r;
  }
};

template <>
struct MmvqType<BlockQ5_0> : Simple32<false> {  // d@0 qh@2 qs@6
  static constexpr int kBytes = sizeof(BlockQ5_0), kAlign = 2;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4], h[1];
    ld_words<4, align_at(A, 6)>(b + 6, w);
    ld_words<1, align_at(A, 2)>(b + 2, h);
    five_bit_codes<16>(w, h[0], r.c);
    r.d = h2f(ld_u16<A>(b));
    r.m = 0.f;
    return r;
  }
};

template <>
struct MmvqType<BlockQ5_1> : Simple32<true> {  // d@0 m@2 qh@4 qs@8
  static constexpr int kBytes = sizeof(BlockQ5_1), kAlign = 8;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4], dmh[2];
    ld_words<4, align_at(A, 8)>(b + 8, w);
    ld_words<2, A>(b, dmh);  // d | m << 16, qh
    five_bit_codes<0>(w, dmh[1], r.c);
    r.d = h2f(dmh[0]);
    r.m = h2f(dmh[0] >> 16);
    return r;
  }
};

template <>
struct MmvqType<BlockQ8_0> : Simple32<false> {  // d@0 qs@2
  static constexpr int kBytes = sizeof(BlockQ8_0), kAlign = 2;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    ld_words<8, align_at(A, 2)>(b + 2, r.c);
    r.d = h2f(ld_u16<A>(b));
    r.m = 0.f;
    return r;
  }
};

template <>
struct MmvqType<BlockIQ4_NL> : Simple32<false> {  // d@0 qs@2
  static constexpr int kBytes = sizeof(BlockIQ4_NL), kAlign = 2;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4];
    ld_words<4, align_at(A, 2)>(b + 2, w);
    table_codes<Iq4Table>(w, r.c);
    r.d = h2f(ld_u16<A>(b));
    r.m = 0.f;
    return r;
  }
};

template <>
struct MmvqType<BlockMXFP4> : Simple32<false> {  // e@0 qs@1
  static constexpr int kBytes = sizeof(BlockMXFP4), kAlign = 1;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int) {
    Codes r;
    uint32_t w[4];
    ld_words<4, align_at(A, 1)>(b + 1, w);
    table_codes<Fp4Table>(w, r.c);
    r.d = bits_to_float(e8m0_half_bits(ldw(b)));
    r.m = 0.f;
    return r;
  }
};

}  // namespace mt::cuda::mmvq_detail
