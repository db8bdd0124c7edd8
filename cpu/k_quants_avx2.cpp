// K-quant dots, AVX2 (+FMA, F16C): the scalar definition (k_quants_scalar.cpp) with 32
// codes per register.
//
// Codes are unpacked to unsigned bytes (Q3_K 0..7, Q6_K 0..63: the -4 / -32 offsets come
// back through the activation's bsums) and multiplied by the int8 activations with
// maddubs (pairs of products never saturate int16: |pair| <= 2 * 63 * 128); madd against
// int16 sub-block scales then sums to int32. IQ4_XS moves the sign onto its codebook
// value (maddubs(|q8|, sign(v, q8)), |pair| <= 2 * 128 * 127). Each block's int32 lanes
// are scaled by d_w * d_a into a float accumulator (Q2_K, Q3_K). The types with a tile
// kernel (gemm_avx2.cpp: Q4_K, Q5_K, Q6_K, IQ4_XS) instead sum each block's lanes to one
// exact int32 and accumulate acc = fma(S, d_w * d_a, acc) (then acc = fma(-M, dmin_w * d_a,
// acc)) in one float, the tile kernels' per-pair arithmetic: a token's dot is
// bit-identical alone and inside a batch (tests/unit/linear_test.cpp).
#include "cpu/register.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cpu/k_quants_scales.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
float half_to_float(half_bits h) { return _cvtsh_ss(h); }
int32_t hsum_i32(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v);
}
int32_t hsum_i32(__m256i v) {
  return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}
__m128i to_vector(Bytes16 b) { return _mm_set_epi64x(static_cast<int64_t>(b.hi), static_cast<int64_t>(b.lo)); }

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Scales of 32-element sub-blocks: `scales` holds 8 int16 in each 128-bit lane; the
// result is scale j in every int16.
__m256i scale_of(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * j)));
}
// Scales of 16-element sub-blocks: `scale_bytes` holds the 16 int8 scales in each lane;
// the result is scale 2g (sign-extended) in the low lane's int16s, 2g + 1 in the high's.
__m256i scale_pair(__m256i scale_bytes, int g) {
  const __m256i idx = _mm256_setr_m128i(_mm_set1_epi8(static_cast<char>(2 * g)),
                                        _mm_set1_epi8(static_cast<char>(2 * g + 1)));
  return _mm256_srai_epi16(_mm256_shuffle_epi8(scale_bytes, idx), 8);
}

// sum += madd(maddubs(codes, q8), scales): int32 lanes.
__m256i dot_add(__m256i sum, __m256i codes, const int8_t* q8, __m256i scales) {
  return _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load256(q8)), scales));
}
// The 2-bit field at `shift` of every byte.
__m256i bits2(__m256i q, int shift) {
  return _mm256_and_si256(_mm256_srli_epi16(q, shift), _mm256_set1_epi8(3));
}
// Bit `bit` of every byte of `mask`, moved to bit `to`.
__m256i bit_to(__m256i mask, int bit, int to) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(mask, bit), _mm256_set1_epi8(1)), to);
}

float dot_q2_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i packed = load128(w[i].scales);
    const __m128i low4 = _mm_set1_epi8(0xF);
    const __m256i scale_bytes = _mm256_broadcastsi128_si256(_mm_and_si128(packed, low4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4));
    const __m256i summ = _mm256_madd_epi16(mins, load256(a[i].bsums));
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(w[i].qs + 32 * half);
      const int8_t* y = a[i].qs + 128 * half;
      for (int k = 0; k < 4; ++k) {
        sumi = dot_add(sumi, bits2(q, 2 * k), y + 32 * k, scale_pair(scale_bytes, 4 * half + k));
      }
    }
    const float da = a[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(da * half_to_float(w[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    acc = _mm256_fnmadd_ps(_mm256_set1_ps(da * half_to_float(w[i].dmin)), _mm256_cvtepi32_ps(summ), acc);
  }
  return hsum(acc);
}

float dot_q3_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i biased = to_vector(unpack_q3k_scales(w[i].scales));
    const __m128i scales = _mm_sub_epi8(biased, _mm_set1_epi8(32));
    const __m256i scale_bytes = _mm256_broadcastsi128_si256(scales);
    // codes 0..7 = value + 4: start from -4 * sum(scale_j * bsum_j).
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), load256(a[i].bsums));
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 2));
    const __m256i hmask = load256(w[i].hmask);
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(w[i].qs + 32 * half);
      const int8_t* y = a[i].qs + 128 * half;
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * half + k;
        const __m256i codes = _mm256_or_si256(bits2(q, 2 * k), bit_to(hmask, g, 2));
        sumi = dot_add(sumi, codes, y + 32 * k, scale_pair(scale_bytes, g));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * half_to_float(w[i].d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

// Q4_K and Q5_K share everything but the fifth bit (kFifthBit: Q5_K).
template <typename Block, bool kFifthBit>
float dot_q45_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const Block*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0xF);
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i scale_min = to_vector(unpack_k4_scales(w[i].scales));
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scale_min));
    // sum(min_j * (bsum_2j + bsum_2j+1)) in 4 int32 lanes.
    const __m128i bsum_pairs = _mm_hadd_epi16(load128(a[i].bsums), load128(a[i].bsums + 8));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(scale_min, 8));
    const int32_t summ = hsum_i32(_mm_madd_epi16(mins, bsum_pairs));
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high)
      const __m256i q = load256(w[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifthBit) {
        const __m256i qh = load256(w[i].qh);
        lo = _mm256_or_si256(lo, bit_to(qh, 2 * c, 4));
        hi = _mm256_or_si256(hi, bit_to(qh, 2 * c + 1, 4));
      }
      sumi = dot_add(sumi, lo, a[i].qs + 64 * c, scale_of(scales, 2 * c));
      sumi = dot_add(sumi, hi, a[i].qs + 64 * c + 32, scale_of(scales, 2 * c + 1));
    }
    const float da = a[i].d;
    acc = std::fma(static_cast<float>(hsum_i32(sumi)), half_to_float(w[i].d) * da, acc);
    acc = std::fma(-static_cast<float>(summ), half_to_float(w[i].dmin) * da, acc);
  }
  return acc;
}

float dot_q6_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0xF);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i scales = load128(w[i].scales);
    const __m256i scale_bytes = _mm256_broadcastsi128_si256(scales);
    // codes 0..63 = value + 32: start from -32 * sum(scale_j * bsum_j).
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), load256(a[i].bsums));
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load256(w[i].ql + 64 * half);
      const __m256i ql1 = load256(w[i].ql + 64 * half + 32);
      const __m256i qh = load256(w[i].qh + 32 * half);
      const __m256i codes[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
      };
      const int8_t* y = a[i].qs + 128 * half;
      for (int k = 0; k < 4; ++k) sumi = dot_add(sumi, codes[k], y + 32 * k, scale_pair(scale_bytes, 4 * half + k));
    }
    acc = std::fma(static_cast<float>(hsum_i32(sumi)), half_to_float(w[i].d) * a[i].d, acc);
  }
  return acc;
}

float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i codebook = _mm256_broadcastsi128_si256(load128(kIq4Values));
  const __m256i low4 = _mm256_set1_epi8(0xF);
  float acc = 0.f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint64_t biased = unpack_iq4xs_scales(w[i].scales_l, w[i].scales_h);
    const __m128i scales16 = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(biased))),
                                           _mm_set1_epi16(32));
    const __m256i scales = _mm256_broadcastsi128_si256(scales16);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {  // sub-block j: low nibbles then high nibbles of 16 bytes
      const __m128i q = load128(w[i].qs + 16 * j);
      const __m256i idx = _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), low4);
      const __m256i v = _mm256_shuffle_epi8(codebook, idx);
      const __m256i y = load256(a[i].qs + 32 * j);
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(v, y));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_of(scales, j)));
    }
    acc = std::fma(static_cast<float>(hsum_i32(sumi)), half_to_float(w[i].d) * a[i].d, acc);
  }
  return acc;
}

}  // namespace

void register_k_quants_avx2(KernelTable& t) {
  t.vec_dot[static_cast<int>(QuantType::Q2_K)] = dot_q2_k;
  t.vec_dot[static_cast<int>(QuantType::Q3_K)] = dot_q3_k;
  t.vec_dot[static_cast<int>(QuantType::Q4_K)] = dot_q45_k<BlockQ4_K, false>;
  t.vec_dot[static_cast<int>(QuantType::Q5_K)] = dot_q45_k<BlockQ5_K, true>;
  t.vec_dot[static_cast<int>(QuantType::Q6_K)] = dot_q6_k;
  t.vec_dot[static_cast<int>(QuantType::IQ4_XS)] = dot_iq4_xs;
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX2 kernels

namespace mt::cpu {
void register_k_quants_avx2(KernelTable&) {}
}  // namespace mt::cpu

#endif
