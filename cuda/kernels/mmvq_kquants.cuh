// MMVQ per-task dot products of the 256-element super-blocks (Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS): four tasks of 64 weights per block, each task a contiguous 16 or 32
// bytes of the block's quants, matched against the Q8_K activations (one d per 256
// elements, cuda/kernels/mmvq_kernels.h) those weights meet.
//
// The arithmetic is cpu/k_quants_scalar.cpp's, cut into tasks: per task the int32 sum
// over its sub-blocks of scale x dot(codes, quants) and (Q2_K, Q4_K, Q5_K) the int32 sum
// of min x (the exact int sum of those activation quants, the CPU's bsums), then
// d_a * d_w * float(sumi) - d_a * dmin * float(summ) in float. The CPU forms the same
// int sums over the whole super-block; the two differ only in float summation order.
// Packed scales are unpacked branch-free four at a time (as cpu/k_quants_scales.h).
// Task maps (element indices inside the super-block, layouts as
// shared/reference/quant_formats.md):
//   Q2_K/Q3_K  task = (half h, 16-byte half g): bytes qs[32h + 16g, +16) hold, for shift
//              k = 0..3, elements 128h + 32k + 16g + (0..15), scale index 8h + 2k + g
//              (Q3_K: high bits in hmask[16g, +16), bit 4h + k).
//   Q4_K/Q5_K  task = chunk c: bytes qs[32c, +32) hold elements 64c + (0..31) (low
//              nibbles, sub-block 2c) and 64c + 32 + (0..31) (high, sub-block 2c + 1);
//              Q5_K's fifth bits are bits 2c and 2c + 1 of qh[0, 32).
//   Q6_K       task = (half h, quarter pair p): ql[64h + 32p, +32) and qh[32h, +32) hold
//              elements 128h + 32p + (0..31) and 128h + 32(p + 2) + (0..31); scales
//              8h + 2p (+1 for the second 16) and 8h + 2p + 4 (+1).
//   IQ4_XS     task = sub-blocks 2t, 2t + 1: qs[32t, +32) in the Q4_0 nibble layout.
#pragma once

#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/mmvq_simple.cuh"
#include "quant/blocks.h"

namespace mt::cuda::mmvq_detail {

// Byte k of w as an int.
MT_HD int byte_at(uint32_t w, int k) { return static_cast<int>((w >> (8 * k)) & 0xFFu); }
MT_HD int sbyte_at(uint32_t w, int k) { return static_cast<int8_t>(w >> (8 * k)); }

// Q2_K / Q3_K activations of a task: for shift k, 16 quants of 32-block q1 + k at 16g;
// d is the super-block's. kSums (Q2_K): also the exact sum of each of those 16.
struct Act16x4 {
  uint32_t a[4][4];
  float d;
  int sum[4];  // kSums only
};
template <bool kSums>
MT_HD Act16x4 load_16x4(const ActRow& x, int q1, int g) {
  Act16x4 r;
  for (int k = 0; k < 4; ++k) act_words<4>(x, 32 * (q1 + k) + 16 * g, r.a[k]);
  if constexpr (kSums) {
    for (int k = 0; k < 4; ++k) {
      const ActMeta m = act_meta(x, q1 + k);
      r.sum[k] = g != 0 ? m.sum_hi : m.sum_lo;
      if (k == 0) r.d = m.d;
    }
  } else {
    r.d = act_d(x, q1);
    for (int k = 0; k < 4; ++k) r.sum[k] = 0;
  }
  return r;
}

// Q4_K, Q5_K, Q6_K, IQ4_XS activations of a task: whole 32-blocks qa and qb of one
// super-block (d its scale). kSums (Q4_K, Q5_K): also the exact sums of their quants.
struct Act2x32 {
  uint32_t a[8], b[8];
  float d;
  int suma, sumb;  // kSums only
};
template <bool kSums>
MT_HD Act2x32 load_2x32(const ActRow& x, int qa, int qb) {
  Act2x32 r;
  act_words<8>(x, 32 * qa, r.a);
  act_words<8>(x, 32 * qb, r.b);
  if constexpr (kSums) {
    const ActMeta ma = act_meta(x, qa), mb = act_meta(x, qb);
    r.d = ma.d;
    r.suma = ma.sum_lo + ma.sum_hi, r.sumb = mb.sum_lo + mb.sum_hi;
  } else {
    r.d = act_d(x, qa);
    r.suma = r.sumb = 0;
  }
  return r;
}

// A task's share of cpu/k_quants_scalar.cpp block_sum.
MT_HD float task_sum(float da, float d, int sumi) { return da * d * static_cast<float>(sumi); }
MT_HD float task_sum(float da, float d, float dmin, int sumi, int summ) {
  return da * d * static_cast<float>(sumi) - da * dmin * static_cast<float>(summ);
}

template <>
struct MmvqType<BlockQ2_K> {  // scales@0 qs@16 d@80 dmin@82
  static constexpr int kBytes = sizeof(BlockQ2_K), kElems = 256, kTasks = 4, kAlign = 4;
  struct Codes {
    uint32_t v[4][4];  // shift k: elements 128h + 32k + 16g + 4i.. in word i
    uint32_t sc;       // byte k: scale (low nibble) and min (high) of shift k
    float d, dmin;
  };
  using Act = Act16x4;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int t) {
    const int h = t >> 1, g = t & 1;
    Codes r;
    uint32_t q[4], s[2];
    ld_words<4, align_at(A, 16)>(b + 16 + 32 * h + 16 * g, q);
    ld_words<2, align_at(A, 8)>(b + 8 * h, s);  // scales[8h, 8h + 8): shift k uses byte 2k + g
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 4; ++i) r.v[k][i] = (q[i] >> (2 * k)) & 0x03030303u;
    }
    r.sc = byte_perm(s[0], s[1], 0x6420u + 0x1111u * static_cast<uint32_t>(g));
    r.d = h2f(ld_u16<align_at(A, 80)>(b + 80));
    r.dmin = h2f(ld_u16<align_at(A, 82)>(b + 82));
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int t) { return load_16x4<true>(x, q0 + 4 * (t >> 1), t & 1); }
  MT_HD static float dot(const Codes& c, const Act& a) {
    int sumi = 0, summ = 0;
    for (int k = 0; k < 4; ++k) {
      const int sc = byte_at(c.sc, k);
      sumi += dot_words<4>(c.v[k], a.a[k]) * (sc & 0xF);
      summ += a.sum[k] * (sc >> 4);
    }
    return task_sum(a.d, c.d, c.dmin, sumi, summ);
  }
};

template <>
struct MmvqType<BlockQ3_K> {  // hmask@0 qs@32 scales@96 d@108
  static constexpr int kBytes = sizeof(BlockQ3_K), kElems = 256, kTasks = 4, kAlign = 2;
  struct Codes {
    uint32_t v[4][4];  // as Q2_K, signed -4..3
    uint32_t sc;       // byte k: the scale of shift k biased by +32
    float d;
  };
  using Act = Act16x4;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int t) {
    const int h = t >> 1, g = t & 1;
    Codes r;
    uint32_t q[4], hm[4], u[3];
    ld_words<4, align_at(A, 16)>(b + 32 + 32 * h + 16 * g, q);
    ld_words<4, align_at(A, 16)>(b + 16 * g, hm);
    ld_words<3, align_at(A, 32)>(b + 96, u);
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 4; ++i) {
        const uint32_t low = (q[i] >> (2 * k)) & 0x03030303u;
        const uint32_t high = ((hm[i] >> (4 * h + k)) & 0x01010101u) << 2;  // set: q2, clear: q2 - 4
        r.v[k][i] = vsub4(low | high, 0x04040404u);
      }
    }
    // Scales 8h..8h+3 and 8h+4..8h+7 biased by +32, a byte each (quant/blocks.h q3k_scale);
    // shift k uses scale 8h + 2k + g.
    const uint32_t s0 = ((u[0] >> (4 * h)) & 0x0F0F0F0Fu) | (((u[2] >> (4 * h)) & 0x03030303u) << 4);
    const uint32_t s1 = ((u[1] >> (4 * h)) & 0x0F0F0F0Fu) | (((u[2] >> (2 + 4 * h)) & 0x03030303u) << 4);
    r.sc = byte_perm(s0, s1, 0x6420u + 0x1111u * static_cast<uint32_t>(g));
    r.d = h2f(ld_u16<align_at(A, 108)>(b + 108));
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int t) { return load_16x4<false>(x, q0 + 4 * (t >> 1), t & 1); }
  MT_HD static float dot(const Codes& c, const Act& a) {
    int sumi = 0;
    for (int k = 0; k < 4; ++k) sumi += dot_words<4>(c.v[k], a.a[k]) * (byte_at(c.sc, k) - 32);
    return task_sum(a.d, c.d, sumi);
  }
};

// Q4_K and Q5_K: lo / hi = the codes of sub-blocks 2c and 2c + 1.
struct CodesQ45 {
  uint32_t lo[8], hi[8];
  uint32_t sm;  // bytes: scale 2c, scale 2c + 1, min 2c, min 2c + 1
  float d, dmin;
};
// The scales and mins of chunk c from the 12 packed bytes (cpu/k_quants_scales.h
// unpack_k4_scales: sub-blocks 0..3 or 4..7, then the pair of chunk c).
MT_HD uint32_t scale_min_pair(const uint32_t (&u)[3], int c) {
  const bool upper = c >= 2;
  const uint32_t sw = upper ? (u[2] & 0x0F0F0F0Fu) | ((u[0] >> 2) & 0x30303030u) : u[0] & 0x3F3F3F3Fu;
  const uint32_t mw = upper ? ((u[2] >> 4) & 0x0F0F0F0Fu) | ((u[1] >> 2) & 0x30303030u) : u[1] & 0x3F3F3F3Fu;
  return byte_perm(sw, mw, (c & 1) != 0 ? 0x7632u : 0x5410u);
}
MT_HD float dot_q45(const CodesQ45& c, const Act2x32& a) {
  const int sumi = dot_words<8>(c.lo, a.a) * byte_at(c.sm, 0) + dot_words<8>(c.hi, a.b) * byte_at(c.sm, 1);
  const int summ = a.suma * byte_at(c.sm, 2) + a.sumb * byte_at(c.sm, 3);
  return task_sum(a.d, c.d, c.dmin, sumi, summ);
}

template <>
struct MmvqType<BlockQ4_K> {  // d@0 dmin@2 scales@4 qs@16
  static constexpr int kBytes = sizeof(BlockQ4_K), kElems = 256, kTasks = 4, kAlign = 16;
  using Codes = CodesQ45;
  using Act = Act2x32;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int c) {
    Codes r;
    uint32_t w[8], u[3], dm[1];
    ld_words<8, align_at(A, 16)>(b + 16 + 32 * c, w);
    ld_words<3, align_at(A, 4)>(b + 4, u);
    ld_words<1, A>(b, dm);
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = w[i] & 0x0F0F0F0Fu;
      r.hi[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
    }
    r.sm = scale_min_pair(u, c);
    r.d = h2f(dm[0]);
    r.dmin = h2f(dm[0] >> 16);
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int c) { return load_2x32<true>(x, q0 + 2 * c, q0 + 2 * c + 1); }
  MT_HD static float dot(const Codes& c, const Act& a) { return dot_q45(c, a); }
};

template <>
struct MmvqType<BlockQ5_K> {  // d@0 dmin@2 scales@4 qh@16 qs@48
  static constexpr int kBytes = sizeof(BlockQ5_K), kElems = 256, kTasks = 4, kAlign = 16;
  using Codes = CodesQ45;
  using Act = Act2x32;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int c) {
    Codes r;
    uint32_t w[8], qh[8], u[3], dm[1];
    ld_words<8, align_at(A, 16)>(b + 48 + 32 * c, w);
    ld_words<8, align_at(A, 16)>(b + 16, qh);
    ld_words<3, align_at(A, 4)>(b + 4, u);
    ld_words<1, A>(b, dm);
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = (w[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * c)) & 0x01010101u) << 4);
      r.hi[i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * c + 1)) & 0x01010101u) << 4);
    }
    r.sm = scale_min_pair(u, c);
    r.d = h2f(dm[0]);
    r.dmin = h2f(dm[0] >> 16);
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int c) { return load_2x32<true>(x, q0 + 2 * c, q0 + 2 * c + 1); }
  MT_HD static float dot(const Codes& c, const Act& a) { return dot_q45(c, a); }
};

template <>
struct MmvqType<BlockQ6_K> {  // ql@0 qh@128 scales@192 d@208
  static constexpr int kBytes = sizeof(BlockQ6_K), kElems = 256, kTasks = 4, kAlign = 2;
  struct Codes {
    uint32_t lo[8], hi[8];  // quarters p and p + 2, signed -32..31
    uint32_t sc;            // int8 scales 8h + 2p, +1, 8h + 2p + 4, +5
    float d;
  };
  using Act = Act2x32;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int t) {
    const int h = t >> 1, p = t & 1;
    Codes r;
    uint32_t ql[8], qh[8];
    ld_words<8, align_at(A, 32)>(b + 64 * h + 32 * p, ql);
    ld_words<8, align_at(A, 32)>(b + 128 + 32 * h, qh);
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = vsub4((ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * p)) & 0x03030303u) << 4), 0x20202020u);
      r.hi[i] = vsub4(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * p + 4)) & 0x03030303u) << 4), 0x20202020u);
    }
    r.sc = ld_u16<align_at(A, 2)>(b + 192 + 8 * h + 2 * p) | (ld_u16<align_at(A, 2)>(b + 196 + 8 * h + 2 * p) << 16);
    r.d = h2f(ld_u16<align_at(A, 208)>(b + 208));
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int t) {
    const int qa = q0 + 4 * (t >> 1) + (t & 1);
    return load_2x32<false>(x, qa, qa + 2);
  }
  MT_HD static float dot(const Codes& c, const Act& a) {
    const int ia = dot_words<4>(c.lo, a.a) * sbyte_at(c.sc, 0) + dot_words<4>(c.lo + 4, a.a + 4) * sbyte_at(c.sc, 1);
    const int ib = dot_words<4>(c.hi, a.b) * sbyte_at(c.sc, 2) + dot_words<4>(c.hi + 4, a.b + 4) * sbyte_at(c.sc, 3);
    return task_sum(a.d, c.d, ia + ib);
  }
};

template <>
struct MmvqType<BlockIQ4_XS> {  // d@0 scales_h@2 scales_l@4 qs@8
  static constexpr int kBytes = sizeof(BlockIQ4_XS), kElems = 256, kTasks = 4, kAlign = 8;
  struct Codes {
    uint32_t c[16];  // sub-blocks 2t and 2t + 1
    int ls0, ls1;    // their scales minus 32
    float d;
  };
  using Act = Act2x32;
  template <int A>
  MT_HD static Codes decode(const uint8_t* b, int t) {
    Codes r;
    uint32_t w[8], hdr[2];
    ld_words<8, align_at(A, 8)>(b + 8 + 32 * t, w);
    ld_words<2, A>(b, hdr);  // d | scales_h << 16, scales_l
    table_codes<Iq4Table>(w, r.c);
    const int ib = 2 * t;  // low 4 bits: nibble ib of scales_l; high 2: bits 2ib of scales_h
    r.ls0 = static_cast<int>(((hdr[1] >> (4 * ib)) & 0xF) | (((hdr[0] >> (16 + 2 * ib)) & 3) << 4)) - 32;
    r.ls1 = static_cast<int>(((hdr[1] >> (4 * ib + 4)) & 0xF) | (((hdr[0] >> (18 + 2 * ib)) & 3) << 4)) - 32;
    r.d = h2f(hdr[0]);
    return r;
  }
  MT_HD static Act load(const ActRow& x, int q0, int t) { return load_2x32<false>(x, q0 + 2 * t, q0 + 2 * t + 1); }
  MT_HD static float dot(const Codes& c, const Act& a) {
    return task_sum(a.d, c.d, dot_words<8>(c.c, a.a) * c.ls0 + dot_words<8>(c.c + 8, a.b) * c.ls1);
  }
};

}  // namespace mt::cuda::mmvq_detail
