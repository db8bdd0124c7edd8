// K-quant dots, AVX-512 (F, BW, VL; VNNI when the table's level is kAvx512Vnni): the
// scalar definition (k_quants_scalar.cpp) with 64 codes per register.
//
// As the AVX2 version (k_quants_avx2.cpp): unsigned codes times int8 activations with
// maddubs, the Q3_K / Q6_K offsets and the Q2_K / Q4_K / Q5_K mins through the bsums,
// IQ4_XS with the activation's sign moved onto the codebook value. The int16 pair sums
// are multiplied by the int16 sub-block scales and summed to int32 with vpdpwssd under
// VNNI, madd + add without; both are exact, so the two levels give the same numbers.
// A register holds 4 sub-blocks of 16 (one per 128-bit lane) or 2 of 32 (one per half).
// Q2_K / Q3_K scale each block's int32 lanes by d_w * d_a into a float vector. The types
// with a tile kernel (gemm_avx512.cpp: Q4_K, Q5_K, Q6_K, IQ4_XS) sum each block's lanes to
// one exact int32 and accumulate acc = fma(S, d_w * d_a, acc) (then acc = fma(-M, dmin_w *
// d_a, acc)) in one float, the tile's per-pair arithmetic: a token's dot is bit-identical
// alone and inside a batch (tests/unit/linear_test.cpp).
#include "cpu/register.h"

#if defined(__x86_64__)

// GCC 12 reports its own _mm512_undefined_* placeholders as (maybe-)uninitialized once
// AVX-512 intrinsics are inlined (GCC PR 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cpu/k_quants_scales.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

__m512i load512(const void* p) { return _mm512_loadu_si512(p); }
__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
float half_to_float(half_bits h) { return _cvtsh_ss(h); }
__m128i to_vector(Bytes16 b) { return _mm_set_epi64x(static_cast<int64_t>(b.hi), static_cast<int64_t>(b.lo)); }

constexpr long long kOnes = 0x0001000100010001ll;  // 1 in each int16 of an int64

// Two 256-bit halves, or one 256-bit value in both.
__m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512i both_halves(__m256i v) { return _mm512_broadcast_i64x4(v); }
// Per-half int16 constants (shift counts) and per-half byte constants (bit masks).
__m512i halves16(int lo, int hi) {
  return halves(_mm256_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)));
}
__m512i halves8(int lo, int hi) {
  return halves(_mm256_set1_epi8(static_cast<char>(lo)), _mm256_set1_epi8(static_cast<char>(hi)));
}

// Register r of a block with 16 sub-blocks of 16: scale 4r + lane in each 128-bit lane's
// int16s, from the 16 int16 scales in `scales`.
__m512i scales_16(__m512i scales, int r) {
  const __m512i lane = _mm512_set_epi64(3 * kOnes, 3 * kOnes, 2 * kOnes, 2 * kOnes, kOnes, kOnes, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(lane, _mm512_set1_epi16(static_cast<int16_t>(4 * r))), scales);
}
// Register c of a block with 8 sub-blocks of 32: scale 2c in the low half's int16s,
// 2c + 1 in the high half's, from the 8 int16 scales in every 128-bit lane of `scales`
// (one vpshufb, where a vpermw would cost two shuffle-port uops on Intel cores).
__m512i scales_32(__m512i scales, int c) {
  const int lo = 0x0202 * (2 * c) + 0x0100, hi = 0x0202 * (2 * c + 1) + 0x0100;  // bytes 2j, 2j + 1
  return _mm512_shuffle_epi8(scales, halves16(lo, hi));
}

// sum += pair sums of p times scales, in int32 lanes.
template <bool kVnni>
__m512i scaled_add(__m512i sum, __m512i p, __m512i scales) {
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(sum, p, scales);
  } else {
    return _mm512_add_epi32(sum, _mm512_madd_epi16(p, scales));
  }
}
template <bool kVnni>
__m512i dot_add(__m512i sum, __m512i codes, const int8_t* q8, __m512i scales) {
  return scaled_add<kVnni>(sum, _mm512_maddubs_epi16(codes, load512(q8)), scales);
}

template <bool kVnni>
float dot_q2_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m512i three = _mm512_set1_epi8(3);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i packed = load128(w[i].scales);
    const __m128i low4 = _mm_set1_epi8(0xF);
    const __m512i scales = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, low4)));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4));
    const __m512i summ = _mm512_zextsi256_si512(_mm256_madd_epi16(mins, load256(a[i].bsums)));
    __m512i sumi = _mm512_setzero_si512();
    for (int r = 0; r < 4; ++r) {  // elements 64r .. 64r + 63: shifts 4(r%2) and +2 of qs[32(r/2)..]
      const __m512i q = both_halves(load256(w[i].qs + 32 * (r / 2)));
      const int shift = 4 * (r % 2);
      const __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(shift, shift + 2)), three);
      sumi = dot_add<kVnni>(sumi, codes, a[i].qs + 64 * r, scales_16(scales, r));
    }
    const float da = a[i].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(da * half_to_float(w[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    acc = _mm512_fnmadd_ps(_mm512_set1_ps(da * half_to_float(w[i].dmin)), _mm512_cvtepi32_ps(summ), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

template <bool kVnni>
float dot_q3_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i biased = to_vector(unpack_q3k_scales(w[i].scales));
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(biased, _mm_set1_epi8(32)));
    const __m512i scales = _mm512_castsi256_si512(scales16);
    // codes 0..7 = value + 4: start from -4 * sum(scale_j * bsum_j).
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, load256(a[i].bsums)), 2);
    __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), offset));
    const __m512i hmask = both_halves(load256(w[i].hmask));
    for (int r = 0; r < 4; ++r) {  // groups of 32: 2r (low half) and 2r + 1 (high half)
      const __m512i q = both_halves(load256(w[i].qs + 32 * (r / 2)));
      const int shift = 4 * (r % 2);
      const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(shift, shift + 2)), three);
      const __mmask64 high = _mm512_test_epi8_mask(hmask, halves8(1 << (2 * r), 1 << (2 * r + 1)));
      const __m512i codes = _mm512_mask_add_epi8(low, high, low, four);
      sumi = dot_add<kVnni>(sumi, codes, a[i].qs + 64 * r, scales_16(scales, r));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i].d * half_to_float(w[i].d)), _mm512_cvtepi32_ps(sumi), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Q4_K and Q5_K share everything but the fifth bit (kFifthBit: Q5_K).
template <typename Block, bool kFifthBit, bool kVnni>
float dot_q45_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const Block*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i nibble_shift = halves16(0, 4);  // low nibbles in the low half, high in the high
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i scale_min = to_vector(unpack_k4_scales(w[i].scales));
    const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scale_min));
    // sum(min_j * (bsum_2j + bsum_2j+1)), exact.
    const __m128i bsum_pairs = _mm_hadd_epi16(load128(a[i].bsums), load128(a[i].bsums + 8));
    const int32_t summ = _mm512_reduce_add_epi32(
        _mm512_zextsi128_si512(_mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scale_min, 8)), bsum_pairs)));
    __m512i sumi = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles, low half) and 2c + 1 (high)
      const __m512i q = both_halves(load256(w[i].qs + 32 * c));
      __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, nibble_shift), low4);
      if constexpr (kFifthBit) {
        const __m512i qh = both_halves(load256(w[i].qh));
        const __mmask64 high = _mm512_test_epi8_mask(qh, halves8(1 << (2 * c), 1 << (2 * c + 1)));
        codes = _mm512_mask_add_epi8(codes, high, codes, _mm512_set1_epi8(16));
      }
      sumi = dot_add<kVnni>(sumi, codes, a[i].qs + 64 * c, scales_32(scales, c));
    }
    const float da = a[i].d;
    acc = std::fma(static_cast<float>(_mm512_reduce_add_epi32(sumi)), half_to_float(w[i].d) * da, acc);
    acc = std::fma(-static_cast<float>(summ), half_to_float(w[i].dmin) * da, acc);
  }
  return acc;
}

template <bool kVnni>
float dot_q6_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scales16 = _mm256_cvtepi8_epi16(load128(w[i].scales));
    const __m512i scales = _mm512_castsi256_si512(scales16);
    // codes 0..63 = value + 32: start from -32 * sum(scale_j * bsum_j).
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, load256(a[i].bsums)), 5);
    __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), offset));
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = load512(w[i].ql + 64 * half);  // groups 0 and 1 (low nibbles), 2 and 3 (high)
      const __m512i qh = both_halves(load256(w[i].qh + 32 * half));
      const __m512i codes01 = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                              _mm512_and_si512(_mm512_sllv_epi16(qh, halves16(4, 2)), bits45));
      const __m512i codes23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                              _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(0, 2)), bits45));
      const int8_t* y = a[i].qs + 128 * half;
      sumi = dot_add<kVnni>(sumi, codes01, y, scales_16(scales, 2 * half));
      sumi = dot_add<kVnni>(sumi, codes23, y + 64, scales_16(scales, 2 * half + 1));
    }
    acc = std::fma(static_cast<float>(_mm512_reduce_add_epi32(sumi)), half_to_float(w[i].d) * a[i].d, acc);
  }
  return acc;
}

template <bool kVnni>
float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m512i codebook = _mm512_broadcast_i32x4(load128(kIq4Values));
  const __m512i low4 = _mm512_set1_epi8(0xF);
  // Per 128-bit lane: low nibbles of sub-block 2c, high of 2c, low of 2c + 1, high of 2c + 1.
  const __m512i nibble_shift = _mm512_set_epi64(4 * kOnes, 4 * kOnes, 0, 0, 4 * kOnes, 4 * kOnes, 0, 0);
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint64_t biased = unpack_iq4xs_scales(w[i].scales_l, w[i].scales_h);
    const __m128i scales16 = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(biased))),
                                           _mm_set1_epi16(32));
    const __m512i scales = _mm512_broadcast_i32x4(scales16);
    __m512i sumi = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low half) and 2c + 1 (high half)
      const __m512i q = _mm512_castsi256_si512(load256(w[i].qs + 32 * c));
      const __m512i lanes = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 1, 0, 0));
      const __m512i v = _mm512_shuffle_epi8(codebook, _mm512_and_si512(_mm512_srlv_epi16(lanes, nibble_shift), low4));
      const __m512i y = load512(a[i].qs + 64 * c);
      const __m512i signed_v = _mm512_mask_sub_epi8(v, _mm512_movepi8_mask(y), _mm512_setzero_si512(), v);
      const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(y), signed_v);
      sumi = scaled_add<kVnni>(sumi, p, scales_32(scales, c));
    }
    acc = std::fma(static_cast<float>(_mm512_reduce_add_epi32(sumi)), half_to_float(w[i].d) * a[i].d, acc);
  }
  return acc;
}

template <bool kVnni>
void fill(KernelTable& t) {
  t.vec_dot[static_cast<int>(QuantType::Q2_K)] = dot_q2_k<kVnni>;
  t.vec_dot[static_cast<int>(QuantType::Q3_K)] = dot_q3_k<kVnni>;
  t.vec_dot[static_cast<int>(QuantType::Q4_K)] = dot_q45_k<BlockQ4_K, false, kVnni>;
  t.vec_dot[static_cast<int>(QuantType::Q5_K)] = dot_q45_k<BlockQ5_K, true, kVnni>;
  t.vec_dot[static_cast<int>(QuantType::Q6_K)] = dot_q6_k<kVnni>;
  t.vec_dot[static_cast<int>(QuantType::IQ4_XS)] = dot_iq4_xs<kVnni>;
}

}  // namespace

void register_k_quants_avx512(KernelTable& t) {
  if (t.isa == Isa::kAvx512Vnni) {
    fill<true>(t);
  } else {
    fill<false>(t);
  }
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX-512 kernels

namespace mt::cpu {
void register_k_quants_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
