// The simple family on AVX2 + FMA + F16C (this file alone is compiled with those flags).
//
// Dots: a block's 32 weight codes become 32 int8 lanes (nibbles split by a shift and a
// mask, Q5's fifth bits spread by a byte shuffle, IQ4_NL / MXFP4 through a pshufb table)
// and meet the activation's int8 codes in maddubs (unsigned x signed) and madd (int16
// pairs -> int32). Q4_0 / Q5_0 go in as their unsigned codes, the offset (8, 16) taken
// off as offset * a by a second maddubs; IQ4_NL, MXFP4 and Q8_0 use the sign trick (|w|
// against sign(w) * a). The 8 int32 lanes are converted to float and multiplied by the
// block's scale product (scales read through cpu/scale_tables.h) into one of two float
// accumulators; two blocks per iteration.
// Quantizers reproduce quant/'s reference bit for bit: the same float operations in the
// same order, roundf's ties away from zero and nearest_int's ties to even rebuilt
// exactly, NaN lanes ignored by the max and mapped to code 0.
//
// Invariant: everything here has internal linkage and nothing from a shared header with
// code is called (only block layouts and constant tables are used): an inline function
// compiled here with AVX2 flags must never be merged into the scalar build.
#include "cpu/register.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

// ---- helpers

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }

// max(|v|, acc) lane-wise; a NaN lane of v leaves acc as it was (maxps returns its
// second operand when either is NaN), so NaN never enters acc.
inline __m256 max_abs(__m256 v, __m256 acc) { return _mm256_max_ps(abs_ps(v), acc); }

// ---- dot building blocks

// 16 bytes of nibbles -> 32 bytes: element j (low nibble of byte j) in byte j, element
// j + 16 (high nibble of byte j) in byte j + 16.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// Q5's 32 fifth bits (little-endian uint32) -> byte j = 0x10 where bit j is set, else 0.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  const __m256i byte_of = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of);
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // every bit but bit (j % 8)
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(v, others), _mm256_set1_epi8(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i table16(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// The int16 lanes of maddubs summed in pairs to int32.
inline __m256i pairs_to_i32(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// 8 int32, each the sum of 4 products (u - kOffset) * a of unsigned weight codes u
// (u <= 31 + kOffset, kOffset <= 16) and activation codes a: maddubs takes u unsigned,
// and the offset comes off as kOffset * a, also by maddubs, before the int16 pairs widen.
template <int kOffset>
inline __m256i dot_offset(__m256i u, __m256i a) {
  __m256i p16 = _mm256_maddubs_epi16(u, a);
  if constexpr (kOffset != 0) p16 = _mm256_sub_epi16(p16, _mm256_maddubs_epi16(_mm256_set1_epi8(kOffset), a));
  return pairs_to_i32(p16);
}

// 8 int32, each the sum of 4 products of signed weight codes w (|w| <= 128) and
// activation codes a (|a| <= 127): maddubs sees |w| (unsigned) against sign(w) * a.
inline __m256i dot_signed(__m256i w, __m256i a) {
  return pairs_to_i32(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w)));
}

// fp16 scale bits -> float through the table (cpu/scale_tables.h).
inline float table_half(uint16_t h) { return kFp16ToFp32.v[h]; }

// One policy per weight type: its activation block, the int32 lanes of a block's dot,
// the weight's float scale and (Q4_1 / Q5_1) the min term m_w * s_a.
struct Q4_0Dot {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static __m256i ints(const W& w, const A& a) { return dot_offset<8>(unpack_nibbles(w.qs), load32(a.qs)); }
  static float scale(const W& w) { return table_half(w.d); }
};

struct Q4_1Dot {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static __m256i ints(const W& w, const A& a) { return dot_offset<0>(unpack_nibbles(w.qs), load32(a.qs)); }
  static float scale(const W& w) { return table_half(w.d); }
  static float min_term(const W& w, const A& a) { return table_half(w.m) * table_half(a.s); }
};

struct Q5_0Dot {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static __m256i ints(const W& w, const A& a) {
    return dot_offset<16>(_mm256_or_si256(unpack_nibbles(w.qs), fifth_bits(w.qh)), load32(a.qs));
  }
  static float scale(const W& w) { return table_half(w.d); }
};

struct Q5_1Dot {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static __m256i ints(const W& w, const A& a) {
    return dot_offset<0>(_mm256_or_si256(unpack_nibbles(w.qs), fifth_bits(w.qh)), load32(a.qs));
  }
  static float scale(const W& w) { return table_half(w.d); }
  static float min_term(const W& w, const A& a) { return table_half(w.m) * table_half(a.s); }
};

struct Q8_0Dot {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static __m256i ints(const W& w, const A& a) { return dot_signed(load32(w.qs), load32(a.qs)); }
  static float scale(const W& w) { return table_half(w.d); }
};

struct IQ4_NLDot {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static __m256i ints(const W& w, const A& a) {
    return dot_signed(_mm256_shuffle_epi8(table16(kIq4Values), unpack_nibbles(w.qs)), load32(a.qs));
  }
  static float scale(const W& w) { return table_half(w.d); }
};

struct MXFP4Dot {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static __m256i ints(const W& w, const A& a) {
    return dot_signed(_mm256_shuffle_epi8(table16(kFp4x2Values), unpack_nibbles(w.qs)), load32(a.qs));
  }
  static float scale(const W& w) { return kE8m0HalfToFp32.v[w.e]; }
};

template <typename P>
constexpr bool kHasMin = requires(const typename P::W& w, const typename P::A& a) { P::min_term(w, a); };

// acc + block's int32 lanes * (weight scale * activation scale)
template <typename P>
inline __m256 block_step(const typename P::W& w, const typename P::A& a, __m256 acc) {
  const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(P::scale(w)), _mm256_broadcast_ss(&kFp16ToFp32.v[a.d]));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(P::ints(w, a)), scale, acc);
}

// One float accumulator, blocks in order: the arithmetic of gemm_avx2.cpp's 32-element
// tiles per (row, token) pair, so a token's dot is bit-identical alone and inside a batch.
// The min terms (Q4_1 / Q5_1, no tile kernel) add up in two chains beside it.
template <typename P>
float dot_blocks(int64_t n, const void* weight, const void* act) {
  const auto* w = static_cast<const typename P::W*>(weight);
  const auto* a = static_cast<const typename P::A*>(act);
  const int64_t nb = n / kQK32;
  __m256 acc = _mm256_setzero_ps();
  float mins[2] = {0.f, 0.f};
  for (int64_t i = 0; i < nb; ++i) {
    acc = block_step<P>(w[i], a[i], acc);
    if constexpr (kHasMin<P>) mins[i & 1] += P::min_term(w[i], a[i]);
  }
  return hsum(acc) + (mins[0] + mins[1]);
}

// MXFP4's one-token dot: blocks round-robin over four accumulators, a quarter of
// dot_blocks' fmadd dependency chain (gpt-oss-20b's MXFP4 decode on 2 AVX2 cores: 4.79 ->
// ~6.0 t/s; the one chain was the bound). Its tile (gemm_avx2.cpp q32_rows4) keeps this
// order per (row, token), so a batch and single tokens agree bit for bit.
template <typename P>
float dot_blocks_pairs(int64_t n, const void* weight, const void* act) {
  static_assert(!kHasMin<P>);
  const auto* w = static_cast<const typename P::W*>(weight);
  const auto* a = static_cast<const typename P::A*>(act);
  const int64_t nb = n / kQK32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 3 < nb; i += 4) {
    acc0 = block_step<P>(w[i], a[i], acc0);
    acc1 = block_step<P>(w[i + 1], a[i + 1], acc1);
    acc2 = block_step<P>(w[i + 2], a[i + 2], acc2);
    acc3 = block_step<P>(w[i + 3], a[i + 3], acc3);
  }
  for (; i < nb; ++i) acc0 = block_step<P>(w[i], a[i], acc0);
  return hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

// ---- float dots: 32 elements per iteration in four accumulators, then 8, then scalar

inline __m256 load8_f32(const void* row, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(row) + i); }
// F16 / BF16 rows may start at any address.
inline __m128i load8_u16(const void* row, int64_t i) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + 2 * i));
}
inline __m256 load8_f16(const void* row, int64_t i) { return _mm256_cvtph_ps(load8_u16(row, i)); }
inline __m256 load8_bf16(const void* row, int64_t i) {
  const __m128i h = load8_u16(row, i);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline uint16_t load_u16(const void* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(row) + 2 * i, sizeof(h));
  return h;
}
inline float load1_f32(const void* row, int64_t i) { return static_cast<const float*>(row)[i]; }
inline float load1_f16(const void* row, int64_t i) { return half_to_float(load_u16(row, i)); }
inline float load1_bf16(const void* row, int64_t i) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(load_u16(row, i)) << 16)));
}

template <__m256 (*Load8)(const void*, int64_t), float (*Load1)(const void*, int64_t)>
float dot_float(int64_t n, const void* weight, const void* act) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(Load8(weight, i + 8 * k), Load8(act, i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Load8(weight, i), Load8(act, i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += Load1(weight, i) * Load1(act, i);
  return sum;
}

// ---- activation quantizers

// 1 / d, or 0 when d is zero or the reciprocal is not finite (quant/'s inverse_or_zero).
inline float inverse_or_zero(float d) {
  if (d == 0.f) return 0.f;
  const float r = 1.f / d;
  return __builtin_isfinite(r) ? r : 0.f;
}

// roundf (ties away from zero) clamped to [-127, 127], NaN -> 0, as int32 lanes. The
// fraction v - trunc(v) is exact, so comparing it with 0.5 decides the tie exactly.
inline __m256i round_clamp127(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.f));
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.f))));
  r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
  return _mm256_cvttps_epi32(r);
}

// Four vectors of 8 int32 (each in int8 range) -> 32 int8 in order.
inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-element block as quant/'s Q8_0 / Q8_1 quantizer: d = amax / 127, q = roundf(x / d).
struct Q8Block {
  float d;      // the scale before its rounding to fp16
  int32_t sum;  // the sum of the codes
};
inline Q8Block quantize_q8_block(const float* x, uint16_t* d_out, int8_t* qs) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = max_abs(v[k], amax);
  }
  const float d = hmax(amax) / 127;
  const __m256 id = _mm256_set1_ps(inverse_or_zero(d));
  *d_out = float_to_half(d);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = round_clamp127(_mm256_mul_ps(v[k], id));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i8(q[0], q[1], q[2], q[3]));
  return {d, hsum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])))};
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
// bit) clamped to [-128, 127].
inline __m256i nearest_clamp128(__m256 v) {
  const __m256i biased = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
  const __m256i i = _mm256_sub_epi32(_mm256_and_si256(biased, _mm256_set1_epi32(0x007fffff)),
                                     _mm256_set1_epi32(0x00400000));
  return _mm256_min_epi32(_mm256_max_epi32(i, _mm256_set1_epi32(-128)), _mm256_set1_epi32(127));
}

// Four vectors of 8 int32 -> their four horizontal sums.
inline __m128i hsum4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// One 256-element block as quant/'s Q8_K quantizer: iscale = -127 / (the signed value of
// the first element of largest magnitude), q = nearest_int(iscale * x), d = 1 / iscale.
void quantize_q8_k_block(const float* x, BlockQ8_K* y) {
  __m256 m0 = _mm256_setzero_ps();
  __m256 m1 = _mm256_setzero_ps();
  for (int k = 0; k < kQKK; k += 16) {
    m0 = max_abs(_mm256_loadu_ps(x + k), m0);
    m1 = max_abs(_mm256_loadu_ps(x + k + 8), m1);
  }
  const float amax = hmax(_mm256_max_ps(m0, m1));
  float max = 0.f;
  if (amax != 0.f) {
    const __m256 target = _mm256_set1_ps(amax);
    for (int k = 0; k < kQKK; k += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + k)), target, _CMP_EQ_OQ));
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
  const __m256 is = _mm256_set1_ps(iscale);
  __m256i group_sums[kQKK / 16];  // 8 int32 lanes that add up to bsums[g]
  for (int c = 0; c < kQKK / 32; ++c) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = nearest_clamp128(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * c + 8 * k)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->qs + 32 * c), pack_i8(q[0], q[1], q[2], q[3]));
    group_sums[2 * c] = _mm256_add_epi32(q[0], q[1]);
    group_sums[2 * c + 1] = _mm256_add_epi32(q[2], q[3]);
  }
  for (int g = 0; g < kQKK / 16; g += 8) {
    const __m128i lo = hsum4(group_sums[g], group_sums[g + 1], group_sums[g + 2], group_sums[g + 3]);
    const __m128i hi = hsum4(group_sums[g + 4], group_sums[g + 5], group_sums[g + 6], group_sums[g + 7]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y->bsums + g), _mm_packs_epi32(lo, hi));
  }
  y->d = 1 / iscale;
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quantize_q8_k_block(x + kQKK * i, &y[i]);
}

void quantize_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

inline void store_u16(void* row, int64_t i, uint16_t h) {
  std::memcpy(static_cast<uint8_t*>(row) + 2 * i, &h, sizeof(h));
}

void quantize_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) store_u16(dst, i, float_to_half(x[i]));
}

// quant/'s fp32_to_bf16 on 8 lanes: round to nearest even, NaN kept and made quiet.
inline __m256i bf16_lanes(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                        _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

void quantize_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed = _mm256_packus_epi32(bf16_lanes(_mm256_loadu_ps(x + i)), bf16_lanes(_mm256_loadu_ps(x + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 2 * i), _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; i < n; ++i) {
    const __m256i one = bf16_lanes(_mm256_set1_ps(x[i]));
    store_u16(dst, i, static_cast<uint16_t>(_mm256_cvtsi256_si32(one)));
  }
}

void axpy_f16(int64_t n, float a, const void* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8_f16(x, i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * load1_f16(x, i);
}

}  // namespace

void register_simple_avx2(KernelTable& t) {
  t.axpy_f16 = axpy_f16;
  auto set_dot = [&t](QuantType type, VecDotFn fn) { t.vec_dot[static_cast<int>(type)] = fn; };
  auto set_quantize = [&t](QuantType type, QuantizeRowFn fn) { t.quantize[static_cast<int>(type)] = fn; };

  set_quantize(QuantType::Q8_0, quantize_q8_0);
  set_quantize(QuantType::Q8_1, quantize_q8_1);
  set_quantize(QuantType::Q8_K, quantize_q8_k);
  set_quantize(QuantType::F16, quantize_f16);
  set_quantize(QuantType::BF16, quantize_bf16);
  set_quantize(QuantType::F32, quantize_f32);

  set_dot(QuantType::F32, dot_float<load8_f32, load1_f32>);
  set_dot(QuantType::F16, dot_float<load8_f16, load1_f16>);
  set_dot(QuantType::BF16, dot_float<load8_bf16, load1_bf16>);
  set_dot(QuantType::Q4_0, dot_blocks<Q4_0Dot>);
  set_dot(QuantType::Q4_1, dot_blocks<Q4_1Dot>);
  set_dot(QuantType::Q5_0, dot_blocks<Q5_0Dot>);
  set_dot(QuantType::Q5_1, dot_blocks<Q5_1Dot>);
  set_dot(QuantType::Q8_0, dot_blocks<Q8_0Dot>);
  set_dot(QuantType::IQ4_NL, dot_blocks<IQ4_NLDot>);
  set_dot(QuantType::MXFP4, dot_blocks_pairs<MXFP4Dot>);  // see dot_blocks_pairs
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX2 kernels, the scalar ones stay in the table

namespace mt::cpu {
void register_simple_avx2(KernelTable&) {}
}  // namespace mt::cpu

#endif
