// The simple family on AVX-512 F/BW/VL (+ VNNI for the kAvx512Vnni table; this file
// alone is compiled with those flags). Entries not set here keep their AVX2 kernel.
//
// Quantized dots: four 32-element blocks per pair of 512-bit vectors. 128-bit lane k of
// the "lo" vector holds elements 0..15 of block k and lane k of the "hi" vector elements
// 16..31 (for the nibble formats that is exactly the low and the high nibbles of the 16
// code bytes; the activation's two 32-byte pairs are regrouped by two lane shuffles).
// Weight codes go in unsigned, u = code + kOffset, and kOffset * sum(a) comes off:
//   VNNI:    vpdpbusd (u8 x s8, summed in int32, no saturation) for lo, hi and the offset;
//   no VNNI: maddubs + madd, only for the types whose u stays small enough for int16
//            sums (Q8_0 and IQ4_NL, offset 128, keep the AVX2 dots there).
// A lane group of 4 int32 is then one block: converted to float, scaled by the vector of
// the 4 blocks' scale products (cpu/scale_tables.h) and accumulated in one accumulator
// (the tile's order), a last partial group padded with zero-scale blocks.
// Float dots (F32, BF16) and quantizers use 16 lanes per vector with masked tails; F16
// keeps the AVX2 kernels (512-bit fp16 conversions measured slower on AMD Zen 4). The
// quantizers reproduce quant/'s reference bit for bit, as in cpu/simple_avx2.cpp.
//
// Invariant: everything here has internal linkage and nothing from a shared header with
// code is called: an inline function compiled here must never be merged into the scalar
// or AVX2 build. VNNI instructions are only reached from the kAvx512Vnni table.
#include "cpu/register.h"

#if defined(__x86_64__)

// GCC 12 reports its own _mm512_undefined_* placeholders as (maybe-)uninitialized once
// AVX-512 intrinsics are inlined (GCC PR 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

// ---- helpers

inline uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---- quantized dots: four blocks as a (lo, hi) pair of vectors

struct Quad {
  __m512i lo;  // lane k: elements 0..15 of block k
  __m512i hi;  // lane k: elements 16..31 of block k
};

// Four blocks' 16 code bytes of nibbles -> unsigned codes.
inline Quad nibbles4(const uint8_t* q0, const uint8_t* q1, const uint8_t* q2, const uint8_t* q3) {
  const __m256i q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(q0)), load16(q1), 1);
  const __m256i q23 = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(q2)), load16(q3), 1);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  return {_mm512_and_si512(z, m4), _mm512_and_si512(_mm512_srli_epi16(z, 4), m4)};
}

// Four blocks' 32 sequential int8 codes -> (lo, hi): two 64-byte pairs, regrouped by lane.
inline Quad bytes4(const int8_t* q0, const int8_t* q1, const int8_t* q2, const int8_t* q3) {
  const __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(load32(q0)), load32(q1), 1);
  const __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(load32(q2)), load32(q3), 1);
  return {_mm512_shuffle_i64x2(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),   // [0 lo, 1 lo, 2 lo, 3 lo]
          _mm512_shuffle_i64x2(p01, p23, _MM_SHUFFLE(3, 1, 3, 1))};  // [0 hi, 1 hi, 2 hi, 3 hi]
}

// Q5's fifth bits of four blocks -> (lo, hi) byte masks: bit 16 k + j of `lo` is bit j of
// block k's qh, bit 16 k + j of `hi` its bit 16 + j.
struct QuadMask {
  __mmask64 lo;
  __mmask64 hi;
};
inline QuadMask fifth_bits4(const uint8_t* const qh[4]) {
  uint64_t lo = 0, hi = 0;
  for (int k = 0; k < 4; ++k) {
    uint32_t h;
    std::memcpy(&h, qh[k], sizeof(h));
    lo |= static_cast<uint64_t>(h & 0xFFFFu) << (16 * k);
    hi |= static_cast<uint64_t>(h >> 16) << (16 * k);
  }
  return {lo, hi};
}

inline Quad add_bits(Quad q, QuadMask m) {
  const __m512i sixteen = _mm512_set1_epi8(16);
  return {_mm512_mask_add_epi8(q.lo, m.lo, q.lo, sixteen), _mm512_mask_add_epi8(q.hi, m.hi, q.hi, sixteen)};
}

// 16-entry byte table in every 128-bit lane.
inline __m512i table16(const uint8_t* values) { return _mm512_broadcast_i32x4(load16(values)); }
inline Quad lookup(__m512i table, Quad q) {
  return {_mm512_shuffle_epi8(table, q.lo), _mm512_shuffle_epi8(table, q.hi)};
}

// The codebooks shifted to unsigned: kIq4Values + 128 and kFp4x2Values + 12.
struct ShiftedTables {
  uint8_t iq4[16];
  uint8_t fp4[16];
};
constexpr ShiftedTables make_shifted_tables() {
  ShiftedTables t{};
  for (int i = 0; i < 16; ++i) {
    t.iq4[i] = static_cast<uint8_t>(kIq4Values[i] + 128);
    t.fp4[i] = static_cast<uint8_t>(kFp4x2Values[i] + 12);
  }
  return t;
}
constexpr ShiftedTables kShifted = make_shifted_tables();

inline __m512i pairs_to_i32(__m512i p16) { return _mm512_madd_epi16(p16, _mm512_set1_epi16(1)); }

// 16 int32; lane group k sums to block k's sum of (u - kOffset) * a over its 32 elements.
// VNNI: vpdpbusd for lo, hi and the offset, exact for any u8. Without VNNI, maddubs +
// madd, which needs u <= 31 and kOffset <= 16 so the int16 sums stay within
// 4 * 31 * 127 + 4 * 16 * 127.
template <bool kVnni, int kOffset>
inline __m512i quad_dot(const Quad& u, const Quad& a) {
  if constexpr (kVnni) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u.lo, a.lo), u.hi, a.hi);
    if constexpr (kOffset != 0) {
      const __m512i c = _mm512_set1_epi8(static_cast<char>(kOffset));
      p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, c, a.lo), c, a.hi));
    }
    return p;
  } else {
    static_assert(kOffset <= 16, "maddubs path: offset too large for int16 sums");
    __m512i p16 = _mm512_add_epi16(_mm512_maddubs_epi16(u.lo, a.lo), _mm512_maddubs_epi16(u.hi, a.hi));
    if constexpr (kOffset != 0) {
      const __m512i c = _mm512_set1_epi8(kOffset);
      p16 = _mm512_sub_epi16(p16, _mm512_add_epi16(_mm512_maddubs_epi16(c, a.lo), _mm512_maddubs_epi16(c, a.hi)));
    }
    return pairs_to_i32(p16);
  }
}

inline float table_half(uint16_t h) { return kFp16ToFp32.v[h]; }

// One policy per weight type: its activation block, the unsigned codes of four blocks
// (code + kOffset), the weight's float scale and (Q4_1 / Q5_1) the min term's factor.
struct Q4_0Dot {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr int kOffset = 8;
  static Quad codes(const W* const w[4]) { return nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs); }
  static float scale(const W& w) { return table_half(w.d); }
};

struct Q4_1Dot {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr int kOffset = 0;
  static Quad codes(const W* const w[4]) { return nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs); }
  static float scale(const W& w) { return table_half(w.d); }
  static float min(const W& w) { return table_half(w.m); }
};

struct Q5_0Dot {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr int kOffset = 16;
  static Quad codes(const W* const w[4]) {
    const uint8_t* const qh[4] = {w[0]->qh, w[1]->qh, w[2]->qh, w[3]->qh};
    return add_bits(nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs), fifth_bits4(qh));
  }
  static float scale(const W& w) { return table_half(w.d); }
};

struct Q5_1Dot {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr int kOffset = 0;
  static Quad codes(const W* const w[4]) {
    const uint8_t* const qh[4] = {w[0]->qh, w[1]->qh, w[2]->qh, w[3]->qh};
    return add_bits(nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs), fifth_bits4(qh));
  }
  static float scale(const W& w) { return table_half(w.d); }
  static float min(const W& w) { return table_half(w.m); }
};

struct Q8_0Dot {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr int kOffset = 128;  // u = q + 128 = q ^ 0x80
  static Quad codes(const W* const w[4]) {
    const Quad q = bytes4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    return {_mm512_xor_si512(q.lo, flip), _mm512_xor_si512(q.hi, flip)};
  }
  static float scale(const W& w) { return table_half(w.d); }
};

struct IQ4_NLDot {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static constexpr int kOffset = 128;
  static Quad codes(const W* const w[4]) {
    return lookup(table16(kShifted.iq4), nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs));
  }
  static float scale(const W& w) { return table_half(w.d); }
};

struct MXFP4Dot {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static constexpr int kOffset = 12;
  static Quad codes(const W* const w[4]) {
    return lookup(table16(kShifted.fp4), nibbles4(w[0]->qs, w[1]->qs, w[2]->qs, w[3]->qs));
  }
  static float scale(const W& w) { return kE8m0HalfToFp32.v[w.e]; }
};

template <typename P>
constexpr bool kHasMin = requires(const typename P::W& w) { P::min(w); };

// acc (and mins) + blocks b[0..count) of a group of four (count 1..4; the missing ones
// repeat block 0 with scale 0, so they read valid memory and add nothing).
template <typename P, bool kVnni>
inline __m512 quad_step(const typename P::W* w, const typename P::A* a, int count, __m512 acc, __m128* mins) {
  const typename P::W* wk[4];
  const typename P::A* ak[4];
  for (int k = 0; k < 4; ++k) {
    wk[k] = &w[k < count ? k : 0];
    ak[k] = &a[k < count ? k : 0];
  }
  const __m512i ints = quad_dot<kVnni, P::kOffset>(
      P::codes(wk), bytes4(ak[0]->qs, ak[1]->qs, ak[2]->qs, ak[3]->qs));
  const __mmask8 present = static_cast<__mmask8>((1u << count) - 1);
  const __m128 da = _mm_setr_ps(table_half(ak[0]->d), table_half(ak[1]->d), table_half(ak[2]->d), table_half(ak[3]->d));
  const __m128 dw = _mm_setr_ps(P::scale(*wk[0]), P::scale(*wk[1]), P::scale(*wk[2]), P::scale(*wk[3]));
  const __m128 d = _mm_maskz_mul_ps(present, dw, da);
  if constexpr (kHasMin<P>) {
    const __m128 m = _mm_setr_ps(P::min(*wk[0]), P::min(*wk[1]), P::min(*wk[2]), P::min(*wk[3]));
    const __m128 s = _mm_setr_ps(table_half(ak[0]->s), table_half(ak[1]->s), table_half(ak[2]->s), table_half(ak[3]->s));
    *mins = _mm_add_ps(*mins, _mm_maskz_mul_ps(present, m, s));
  }
  // [d0 x4, d1 x4, d2 x4, d3 x4]: each block's scale over its lane group
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512 scales = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(d));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), scales, acc);
}

template <typename P, bool kVnni>
float dot_blocks(int64_t n, const void* weight, const void* act) {
  const auto* w = static_cast<const typename P::W*>(weight);
  const auto* a = static_cast<const typename P::A*>(act);
  const int64_t nb = n / kQK32;
  // One accumulator, the tile's (gemm_avx512.cpp q32_tiles) order: a token's dot is
  // bit-identical alone and inside a batch.
  __m512 acc = _mm512_setzero_ps();
  __m128 mins = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; i += 4) {
    const int count = nb - i < 4 ? static_cast<int>(nb - i) : 4;
    acc = quad_step<P, kVnni>(w + i, a + i, count, acc, &mins);
  }
  __m128 m = _mm_add_ps(mins, _mm_movehl_ps(mins, mins));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(m);
}

// ---- float dots: 64 elements per iteration in four accumulators, then 16, then a masked tail

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// F16 / BF16 rows may start at any address.
inline const uint8_t* u16_at(const void* row, int64_t i) { return static_cast<const uint8_t*>(row) + 2 * i; }

struct F32Row {
  static __m512 load(const void* row, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(row) + i); }
  static __m512 load(const void* row, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + i);
  }
};
struct BF16Row {
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const void* row, int64_t i) { return widen(load32(u16_at(row, i))); }
  static __m512 load(const void* row, int64_t i, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, u16_at(row, i))); }
};

template <typename R>
float dot_float(int64_t n, const void* weight, const void* act) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm512_fmadd_ps(R::load(weight, i + 16 * k), R::load(act, i + 16 * k), acc[k]);
  }
  for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(R::load(weight, i), R::load(act, i), acc[0]);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    acc[1] = _mm512_fmadd_ps(R::load(weight, i, m), R::load(act, i, m), acc[1]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// ---- activation quantizers

// 1 / d, or 0 when d is zero or the reciprocal is not finite (quant/'s inverse_or_zero).
inline float inverse_or_zero(float d) {
  if (d == 0.f) return 0.f;
  const float r = 1.f / d;
  return __builtin_isfinite(r) ? r : 0.f;
}

// max(|v|, acc) lane-wise; a NaN lane of v leaves acc as it was (maxps returns its
// second operand when either is NaN), so NaN never enters acc.
inline __m512 max_abs(__m512 v, __m512 acc) { return _mm512_max_ps(_mm512_abs_ps(v), acc); }

// roundf (ties away from zero) clamped to [-127, 127], NaN -> 0, as int32 lanes. The
// fraction v - trunc(v) is exact, so comparing it with 0.5 decides the tie exactly.
inline __m512i round_clamp127(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 away = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 one = _mm512_set1_ps(1.f);
  __m512 r = _mm512_mask_add_ps(t, away & ~negative, t, one);
  r = _mm512_mask_sub_ps(r, away & negative, r, one);
  r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.f)), _mm512_set1_ps(127.f));
  return _mm512_cvttps_epi32(r);
}

// One 32-element block as quant/'s Q8_0 / Q8_1 quantizer: d = amax / 127, q = roundf(x / d).
struct Q8Block {
  float d;      // the scale before its rounding to fp16
  int32_t sum;  // the sum of the codes
};
inline Q8Block quantize_q8_block(const float* x, uint16_t* d_out, int8_t* qs) {
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const float d = _mm512_reduce_max_ps(max_abs(v1, max_abs(v0, _mm512_setzero_ps()))) / 127;
  const __m512 id = _mm512_set1_ps(inverse_or_zero(d));
  *d_out = float_to_half(d);
  const __m512i q0 = round_clamp127(_mm512_mul_ps(v0, id));
  const __m512i q1 = round_clamp127(_mm512_mul_ps(v1, id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtsepi32_epi8(q1));
  return {d, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1))};
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK32; ++i) quantize_q8_block(x + kQK32 * i, &y[i].d, y[i].qs);
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const Q8Block b = quantize_q8_block(x + kQK32 * i, &y[i].d, y[i].qs);
    y[i].s = float_to_half(static_cast<float>(b.sum) * b.d);
  }
}

// quant/'s nearest_int (ties to even through the 1.5 * 2^23 bias, NaN included bit for
// bit); the int8 conversion's saturation is the clamp to [-128, 127].
inline __m512i nearest(__m512 v) {
  const __m512i biased = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12582912.f)));
  return _mm512_sub_epi32(_mm512_and_si512(biased, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x00400000));
}

// One 256-element block as quant/'s Q8_K quantizer: iscale = -127 / (the signed value of
// the first element of largest magnitude), q = nearest_int(iscale * x), d = 1 / iscale.
void quantize_q8_k_block(const float* x, BlockQ8_K* y) {
  __m512 m0 = _mm512_setzero_ps();
  __m512 m1 = _mm512_setzero_ps();
  for (int k = 0; k < kQKK; k += 32) {
    m0 = max_abs(_mm512_loadu_ps(x + k), m0);
    m1 = max_abs(_mm512_loadu_ps(x + k + 16), m1);
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  float max = 0.f;
  if (amax != 0.f) {
    const __m512 target = _mm512_set1_ps(amax);
    for (int k = 0; k < kQKK; k += 16) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + k)), target, _CMP_EQ_OQ);
      if (hit != 0) {
        max = x[k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
  }
  float iscale = amax != 0.f ? -127.f / max : 0.f;
  if (!__builtin_isfinite(iscale)) iscale = 0.f;
  if (iscale == 0.f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const __m512 is = _mm512_set1_ps(iscale);
  __m512i sums[4];  // per 64 codes: 8 uint64, each the sum of 8 codes + 8 * 128
  for (int c = 0; c < 4; ++c) {
    const float* xc = x + 64 * c;
    auto codes16 = [is](const float* p) { return _mm512_cvtsepi32_epi8(nearest(_mm512_mul_ps(is, _mm512_loadu_ps(p)))); };
    __m512i q = _mm512_castsi128_si512(codes16(xc));
    q = _mm512_inserti32x4(q, codes16(xc + 16), 1);
    q = _mm512_inserti32x4(q, codes16(xc + 32), 2);
    q = _mm512_inserti32x4(q, codes16(xc + 48), 3);
    _mm512_storeu_si512(y->qs + 64 * c, q);
    // q + 128 is unsigned: a sum of absolute differences against zero adds 8 of them
    sums[c] = _mm512_sad_epu8(_mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80))), _mm512_setzero_si512());
    sums[c] = _mm512_add_epi64(sums[c], _mm512_bsrli_epi128(sums[c], 8));  // even lanes: one group of 16
  }
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m128i bias = _mm_set1_epi16(16 * 128);
  const __m128i lo = _mm512_cvtepi64_epi16(_mm512_permutex2var_epi64(sums[0], even, sums[1]));  // groups 0..7
  const __m128i hi = _mm512_cvtepi64_epi16(_mm512_permutex2var_epi64(sums[2], even, sums[3]));  // groups 8..15
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y->bsums), _mm_sub_epi16(lo, bias));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y->bsums + 8), _mm_sub_epi16(hi, bias));
  y->d = 1 / iscale;
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quantize_q8_k_block(x + kQKK * i, &y[i]);
}

void quantize_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

// quant/'s fp32_to_bf16 on 16 lanes: round to nearest even, NaN kept and made quiet.
inline __m256i to_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                        _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

void quantize_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 2 * i), to_bf16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(y + 2 * i, m, to_bf16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

template <bool kVnni>
void register_quantized_dots(KernelTable& t) {
  auto set_dot = [&t](QuantType type, VecDotFn fn) { t.vec_dot[static_cast<int>(type)] = fn; };
  set_dot(QuantType::Q4_0, dot_blocks<Q4_0Dot, kVnni>);
  set_dot(QuantType::Q4_1, dot_blocks<Q4_1Dot, kVnni>);
  set_dot(QuantType::Q5_0, dot_blocks<Q5_0Dot, kVnni>);
  set_dot(QuantType::Q5_1, dot_blocks<Q5_1Dot, kVnni>);
  set_dot(QuantType::MXFP4, dot_blocks<MXFP4Dot, kVnni>);
  if constexpr (kVnni) {  // offset 128: only vpdpbusd takes such codes without saturating
    set_dot(QuantType::Q8_0, dot_blocks<Q8_0Dot, kVnni>);
    set_dot(QuantType::IQ4_NL, dot_blocks<IQ4_NLDot, kVnni>);
  }
}

}  // namespace

void register_simple_avx512(KernelTable& t) {
  auto set_dot = [&t](QuantType type, VecDotFn fn) { t.vec_dot[static_cast<int>(type)] = fn; };
  auto set_quantize = [&t](QuantType type, QuantizeRowFn fn) { t.quantize[static_cast<int>(type)] = fn; };

  set_quantize(QuantType::Q8_0, quantize_q8_0);
  set_quantize(QuantType::Q8_1, quantize_q8_1);
  set_quantize(QuantType::Q8_K, quantize_q8_k);
  set_quantize(QuantType::BF16, quantize_bf16);
  set_quantize(QuantType::F32, quantize_f32);

  // F16 keeps the AVX2 dot and quantizer: 512-bit fp16 conversions measured slower
  set_dot(QuantType::F32, dot_float<F32Row>);
  set_dot(QuantType::BF16, dot_float<BF16Row>);
  if (t.isa == Isa::kAvx512Vnni) {
    register_quantized_dots<true>(t);
  } else {
    register_quantized_dots<false>(t);
  }
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX-512 kernels, the lower levels' stay in the table

namespace mt::cpu {
void register_simple_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
