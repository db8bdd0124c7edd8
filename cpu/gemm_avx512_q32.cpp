// Prefill tile dots of the 32-element blocks against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL),
// AVX-512: the layout and the arithmetic are described at the top of cpu/gemm_avx512.cpp;
// the tile driver is cpu/gemm_avx512_tiles.h.
//
// Invariant: everything here has internal linkage (see cpu/k_quants_scales.h).
#include "cpu/register.h"

#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "cpu/gemm_avx512_tiles.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

// ---- 32-element blocks against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL): four blocks per step,
// float accumulators per pair

struct Quad {
  __m512i lo;  // lane k: elements 0..15 of block k
  __m512i hi;  // lane k: elements 16..31 of block k
};
Quad bytes4(const int8_t* q0, const int8_t* q1, const int8_t* q2, const int8_t* q3) {
  const __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(q0)), load256(q1), 1);
  const __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(load256(q2)), load256(q3), 1);
  return {_mm512_shuffle_i64x2(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
          _mm512_shuffle_i64x2(p01, p23, _MM_SHUFFLE(3, 1, 3, 1))};
}
// Four blocks' 16 code bytes of nibbles -> (low nibbles, high nibbles), lane k block k.
Quad nibbles4(const uint8_t* q0, const uint8_t* q1, const uint8_t* q2, const uint8_t* q3) {
  const __m256i q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(q0)), load128(q1), 1);
  const __m256i q23 = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(q2)), load128(q3), 1);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  return {_mm512_and_si512(z, m4), _mm512_and_si512(_mm512_srli_epi16(z, 4), m4)};
}
// [s0 x4, s1 x4, s2 x4, s3 x4], blocks past `count` zero.
__m512 spread4(float s0, float s1, float s2, float s3, int count) {
  const __m128 s = _mm_maskz_mov_ps(static_cast<__mmask8>((1u << count) - 1), _mm_setr_ps(s0, s1, s2, s3));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

// Weight policies: the signed codes (the value / d) of four blocks in the (lo, hi) layout.
// kSmall: |code| <= 16, so the maddubs path (no VNNI) keeps exact int16 sums.
struct Q8_0W {
  using Block = BlockQ8_0;
  static constexpr bool kSmall = false;
  static Quad codes(const Block* const b[4]) { return bytes4(b[0]->qs, b[1]->qs, b[2]->qs, b[3]->qs); }
};
struct Q4_0W {
  using Block = BlockQ4_0;
  static constexpr bool kSmall = true;
  static Quad codes(const Block* const b[4]) {
    const Quad q = nibbles4(b[0]->qs, b[1]->qs, b[2]->qs, b[3]->qs);
    const __m512i eight = _mm512_set1_epi8(8);
    return {_mm512_sub_epi8(q.lo, eight), _mm512_sub_epi8(q.hi, eight)};
  }
};
struct Q5_0W {
  using Block = BlockQ5_0;
  static constexpr bool kSmall = true;
  static Quad codes(const Block* const b[4]) {
    // bit 16 k + j of `lo`: bit j of block k's qh; of `hi`: its bit 16 + j
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < 4; ++k) {
      const uint32_t h = load_qh(b[k]->qh);
      lo |= static_cast<uint64_t>(h & 0xFFFFu) << (16 * k);
      hi |= static_cast<uint64_t>(h >> 16) << (16 * k);
    }
    const Quad q = nibbles4(b[0]->qs, b[1]->qs, b[2]->qs, b[3]->qs);
    // code - 16: the nibble where the fifth bit is set, nibble - 16 where it is not
    const __m512i sixteen = _mm512_set1_epi8(16);
    return {_mm512_mask_sub_epi8(q.lo, static_cast<__mmask64>(~lo), q.lo, sixteen),
            _mm512_mask_sub_epi8(q.hi, static_cast<__mmask64>(~hi), q.hi, sixteen)};
  }
};
struct IQ4_NLW {
  using Block = BlockIQ4_NL;
  static constexpr bool kSmall = false;
  static Quad codes(const Block* const b[4]) {
    const __m512i table = _mm512_broadcast_i32x4(load128(kIq4Values));
    const Quad q = nibbles4(b[0]->qs, b[1]->qs, b[2]->qs, b[3]->qs);
    return {_mm512_shuffle_epi8(table, q.lo), _mm512_shuffle_epi8(table, q.hi)};
  }
};

// One token's four activation blocks: codes + 128 (unsigned) and the blocks' scales.
struct alignas(64) TokenStep {
  __m512i lo, hi;
  __m512 d;
};

// -128 * (the sum of each lane's 4 weight codes): what the + 128 of the activation adds.
template <bool kVnni>
__m512i minus_128_sum(const Quad& w) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  if constexpr (kVnni) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, flip, w.lo), flip, w.hi));
  } else {  // |w| <= 16: int16 sums within 4 * 128 * 16
    const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(flip, w.lo), _mm512_maddubs_epi16(flip, w.hi));
    return _mm512_madd_epi16(p, _mm512_set1_epi16(-1));
  }
}
// start + sum over each lane's 4 elements of (a + 128) * w.
template <bool kVnni>
__m512i pair_dot(__m512i start, const Quad& w, const TokenStep& a) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, a.lo, w.lo), a.hi, w.hi);
  } else {  // |w| <= 16: int16 sums within 4 * 255 * 16
    const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(a.lo, w.lo), _mm512_maddubs_epi16(a.hi, w.hi));
    return _mm512_add_epi32(start, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
  }
}

// The token tile's activations, regrouped once for all the row tiles of the group.
template <int C>
void token_steps(const Problem& pr, int64_t t0, TokenStep* ts) {
  const int64_t nb = pr.nb;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t = 0; t < C; ++t) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(pr.act + (t0 + t) * pr.act_stride);
    for (int64_t i = 0, s = 0; i < nb; i += 4, ++s) {
      const int count = static_cast<int>(std::min<int64_t>(4, nb - i));
      const int64_t b1 = i + (count > 1 ? 1 : 0), b2 = i + (count > 2 ? 2 : 0), b3 = i + (count > 3 ? 3 : 0);
      const Quad q = bytes4(b[i].qs, b[b1].qs, b[b2].qs, b[b3].qs);
      TokenStep& x = ts[s * C + t];
      x.lo = _mm512_xor_si512(q.lo, flip);
      x.hi = _mm512_xor_si512(q.hi, flip);
      x.d = spread4(half_to_float(b[i].d), half_to_float(b[b1].d), half_to_float(b[b2].d), half_to_float(b[b3].d),
                    count);
    }
  }
}

template <typename P, bool kVnni, int R, int C>
void q32_tiles(const Problem& pr, int64_t r0, int64_t r1, int64_t t0, const TokenStep* ts) {
  static_assert(kVnni || P::kSmall, "maddubs path: codes too large for int16 sums");
  using Block = typename P::Block;
  const int64_t nb = pr.nb;
  for (int64_t r = r0; r < r1; r += R) {
    const Block* w[R];
    for (int k = 0; k < R; ++k) {
      w[k] = reinterpret_cast<const Block*>(pr.w + std::min(r + k, pr.n_rows - 1) * pr.w_stride);
    }
    __m512 acc[R * C];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0, s = 0; i < nb; i += 4, ++s) {
      const int count = static_cast<int>(std::min<int64_t>(4, nb - i));
      const int64_t b1 = i + (count > 1 ? 1 : 0), b2 = i + (count > 2 ? 2 : 0), b3 = i + (count > 3 ? 3 : 0);
      const TokenStep* x = ts + s * C;
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const Block* const b[4] = {w[k] + i, w[k] + b1, w[k] + b2, w[k] + b3};
        const Quad q = P::codes(b);
        const __m512i start = minus_128_sum<kVnni>(q);
        const __m512 d =
            spread4(half_to_float(b[0]->d), half_to_float(b[1]->d), half_to_float(b[2]->d), half_to_float(b[3]->d), 4);
#pragma GCC unroll 8
        for (int t = 0; t < C; ++t) {
          const __m512i ints = pair_dot<kVnni>(start, q, x[t]);
          acc[k * C + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), _mm512_mul_ps(d, x[t].d), acc[k * C + t]);
        }
      }
    }
    const int rows = static_cast<int>(std::min<int64_t>(R, pr.n_rows - r));
    for (int k = 0; k < rows; ++k) {
      for (int t = 0; t < C; ++t) pr.y[(t0 + t) * pr.y_stride + r + k] = _mm512_reduce_add_ps(acc[k * C + t]);
    }
  }
}

// The driver's R x C shapes (2 x 8 for the bulk: measured faster than 4 x 4 and 1 x 8 on
// Zen 4); one row's codes in registers at a time, the tokens' steps read from L1.
template <typename P, bool kVnni>
struct Q32Tiles {
  template <int R, int C>
  struct At {
    static void run(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
      std::vector<TokenStep> ts(static_cast<size_t>((pr.nb + 3) / 4 * C));
      token_steps<C>(pr, t0, ts.data());
      q32_tiles<P, kVnni, R, C>(pr, r0, r1, t0, ts.data());
    }
  };
};

template <typename P, bool kVnni>
void gemm_q32(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
              int64_t n_tok, float* y, int64_t y_stride) {
  MT_CHECK(n % kQK32 == 0);
  if (n_rows <= 0 || n_tok <= 0) return;
  over_tokens<Q32Tiles<P, kVnni>::template At>(problem(n / kQK32, w, w_stride, n_rows, act, act_stride, y, y_stride),
                                                n_tok);
}

}  // namespace

void register_gemm_q32_avx512(KernelTable& t) {
  const bool vnni = t.isa == Isa::kAvx512Vnni;
  // no VNNI: only codes of at most 16 in magnitude (Q8_0, IQ4_NL keep the AVX2 entries)
  t.gemm[static_cast<int>(QuantType::Q4_0)] = vnni ? gemm_q32<Q4_0W, true> : gemm_q32<Q4_0W, false>;
  t.gemm[static_cast<int>(QuantType::Q5_0)] = vnni ? gemm_q32<Q5_0W, true> : gemm_q32<Q5_0W, false>;
  if (vnni) {
    t.gemm[static_cast<int>(QuantType::Q8_0)] = gemm_q32<Q8_0W, true>;
    t.gemm[static_cast<int>(QuantType::IQ4_NL)] = gemm_q32<IQ4_NLW, true>;
  }
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX-512 kernels

namespace mt::cpu {
void register_gemm_q32_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
