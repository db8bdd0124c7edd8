// Prefill tile dots ("GEMM"), AVX-512 (F, BW, VL; VNNI when the table's level is
// kAvx512Vnni): y[t * y_stride + r] = vec_dot(weight row r, activation row t) for a tile
// of R rows x C tokens at once, so each weight block is unpacked once for C tokens and
// each activation block is loaded once per row from L1.
//
// K-quants (Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K), R x C = 16 pairs (2 x 8 for the bulk;
// 4 x 4, 8 x 2, 16 x 1 for the last tokens), per super-block:
//   sum[p], p = r * C + t: 16 int32 zmm, the vec_dot's sumi of that pair (maddubs of the
//     unsigned codes by the int8 activations, then the int16 sub-block scales by vpdpwssd,
//     or madd + add without VNNI; Q6_K's -32 offset starts the sum, as in vec_dot; IQ4_XS's
//     signed codebook values take the activation's sign and maddubs takes |a|);
//   the 16 vectors are reduced by a transposing tree (256-, 128-, 32-bit folds) into one
//     vector S whose lane L holds pair p = 4 (L % 4) + L / 4; Q4_K / Q5_K's min terms
//     (min_j * bsum pairs, 4 int32 partials per pair) enter the tree's last stage as M;
//   acc += S * (d_w * d_a) - M * (dmin_w * d_a), lane by lane: one float FMA per pair.
// 32-element blocks against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL; without VNNI only Q4_0 and
// Q5_0, whose codes stay within +-16, the others keep the AVX2 entries): the same R x C
// shapes of float accumulators, four blocks per step in the (lo, hi) lane layout of
// simple_avx512.cpp. The activation goes in unsigned (a ^ 0x80), regrouped once per token
// tile and row group into a buffer of steps (read from L1 by every row tile); each row's
// four blocks become signed codes once for C tokens, and -128 * sum(w) starts the sum
// (vpdpbusd; without VNNI maddubs + madd, exact in int16 for |w| <= 16).
// The driver walks groups of rows small enough to stay in L2 and, for each token tile,
// the group's row tiles (the token tile's activations stay in L1); rows past the end
// repeat the last row and are not stored. Integer sums are exact, so the results differ
// from vec_dot's only in float summation order.
//
// Invariant: everything here has internal linkage (see cpu/k_quants_scales.h).
#include "cpu/register.h"

#if defined(__x86_64__)

// GCC 12 reports its own _mm512_undefined_* placeholders as (maybe-)uninitialized once
// AVX-512 intrinsics are inlined (GCC PR 105593, fixed in 13).
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
#include "cpu/k_quants_scales.h"
#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

__m512i load512(const void* p) { return _mm512_loadu_si512(p); }
__m128i to_vector(Bytes16 b) { return _mm_set_epi64x(static_cast<int64_t>(b.hi), static_cast<int64_t>(b.lo)); }

constexpr long long kOnes = 0x0001000100010001ll;  // 1 in each int16 of an int64

__m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512i both_halves(__m256i v) { return _mm512_broadcast_i64x4(v); }
__m512i halves16(int lo, int hi) {
  return halves(_mm256_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)));
}
__m512i halves8(int lo, int hi) {
  return halves(_mm256_set1_epi8(static_cast<char>(lo)), _mm256_set1_epi8(static_cast<char>(hi)));
}
__m512i group4(__m128i a, __m128i b, __m128i c, __m128i d) {
  const __m512i ab = _mm512_inserti32x4(_mm512_castsi128_si512(a), b, 1);
  return _mm512_inserti32x4(_mm512_inserti32x4(ab, c, 2), d, 3);
}

// Step s (64 codes) of a block with 16 sub-blocks of 16: scale 4s + lane in each lane.
__m512i scales_16(__m512i scales, int s) {
  const __m512i lane = _mm512_set_epi64(3 * kOnes, 3 * kOnes, 2 * kOnes, 2 * kOnes, kOnes, kOnes, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(lane, _mm512_set1_epi16(static_cast<int16_t>(4 * s))), scales);
}
// Step s of a block with 8 sub-blocks of 32: scale 2s in the low half, 2s + 1 in the high.
__m512i scales_32(__m512i scales, int s) {
  const int lo = 0x0202 * (2 * s) + 0x0100, hi = 0x0202 * (2 * s + 1) + 0x0100;
  return _mm512_shuffle_epi8(scales, halves16(lo, hi));
}

template <bool kVnni>
__m512i dot_add(__m512i sum, __m512i codes, const int8_t* q8, __m512i scales) {
  const __m512i p = _mm512_maddubs_epi16(codes, load512(q8));
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(sum, p, scales);
  } else {
    return _mm512_add_epi32(sum, _mm512_madd_epi16(p, scales));
  }
}

// ---- the transposing reduction: 16 vectors (pair p in vector p) -> lane 4 (p % 4) + p / 4

// Stage 3 alone: 4 vectors whose 128-bit group g holds 4 partials of pair 4j + g (j the
// vector) -> lane 4g + j the pair's total.
__m512i fold_groups(const __m512i u[4]) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[0], u[1]), _mm512_unpackhi_epi32(u[0], u[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[2], u[3]), _mm512_unpackhi_epi32(u[2], u[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

__m512i reduce16(const __m512i v[16]) {
  __m512i w[8];  // w[i]: pair 2i folded to 8 lanes in the low half, pair 2i + 1 in the high
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm512_add_epi32(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512i u[4];  // u[j]: group g = pair 4j + g folded to 4 lanes
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm512_add_epi32(_mm512_shuffle_i64x2(w[2 * j], w[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i64x2(w[2 * j], w[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return fold_groups(u);
}

constexpr int pair_of_lane(int lane) { return 4 * (lane % 4) + lane / 4; }

// Lane L -> the row (kRow) or the token of its pair in an R x C tile (p = r * C + t).
struct LaneIndex {
  alignas(64) int32_t v[16];
};
template <int C, bool kRow>
constexpr LaneIndex make_lane_index() {
  LaneIndex x{};
  for (int lane = 0; lane < 16; ++lane) x.v[lane] = kRow ? pair_of_lane(lane) / C : pair_of_lane(lane) % C;
  return x;
}
template <int C, bool kRow>
constexpr LaneIndex kLaneIndex = make_lane_index<C, kRow>();
template <int C, bool kRow>
__m512i lane_index() {
  return _mm512_load_si512(kLaneIndex<C, kRow>.v);
}

// ---- K-quant policies: a block's prepared scales, the 64 codes of step s (0..3, matching
// activation bytes 64s..64s + 63) and that step's int16 scales.

// Q4_K and Q5_K (kFifthBit): scales (8 int16 in every lane) and mins (8 int16).
template <typename B, bool kFifthBit>
struct Q45K {
  using Block = B;
  static constexpr bool kMins = true;
  struct Prep {
    __m512i scales;
    __m128i mins;
  };
  static Prep prep(const Block& b) {
    const __m128i scale_min = to_vector(unpack_k4_scales(b.scales));
    return {_mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scale_min)), _mm_cvtepu8_epi16(_mm_srli_si128(scale_min, 8))};
  }
  static __m512i codes(const Block& b, int s) {
    const __m512i q = both_halves(load256(b.qs + 32 * s));
    __m512i c = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(0, 4)), _mm512_set1_epi8(0xF));
    if constexpr (kFifthBit) {
      const __mmask64 high = _mm512_test_epi8_mask(both_halves(load256(b.qh)), halves8(1 << (2 * s), 1 << (2 * s + 1)));
      c = _mm512_mask_add_epi8(c, high, c, _mm512_set1_epi8(16));
    }
    return c;
  }
  static __m512i step_scales(const Prep& p, int s) { return scales_32(p.scales, s); }
  static float dmin(const Block& b) { return half_to_float(b.dmin); }
};

// Q6_K: codes 0..63 = value + 32; the sum starts from -32 * sum(scale_j * bsum_j).
struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kMins = false;
  struct Prep {
    __m512i scales;    // 16 int16 in the low half
    __m256i offset16;  // -32 * scale_j
  };
  static Prep prep(const Block& b) {
    const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
    return {_mm512_castsi256_si512(scales16), _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales16, 5))};
  }
  static __m512i start(const Prep& p, const BlockQ8_K& a) {
    return _mm512_zextsi256_si512(_mm256_madd_epi16(p.offset16, load256(a.bsums)));
  }
  static __m512i codes(const Block& b, int s) {
    const int half = s / 2;
    const __m512i ql = load512(b.ql + 64 * half);
    const __m512i qh = both_halves(load256(b.qh + 32 * half));
    const __m512i low4 = _mm512_set1_epi8(0xF), bits45 = _mm512_set1_epi8(0x30);
    if (s % 2 == 0) {
      return _mm512_or_si512(_mm512_and_si512(ql, low4),
                             _mm512_and_si512(_mm512_sllv_epi16(qh, halves16(4, 2)), bits45));
    }
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                           _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(0, 2)), bits45));
  }
  static __m512i step_scales(const Prep& p, int s) { return scales_16(p.scales, s); }
};

// IQ4_XS: signed codebook values (-127..113), 8 sub-blocks of 32 with scales ls - 32;
// the activation's sign moves onto the value (kSignedCodes), maddubs takes |a|.
struct IQ4XS {
  using Block = BlockIQ4_XS;
  static constexpr bool kMins = false;
  static constexpr bool kSignedCodes = true;
  struct Prep {
    __m512i scales;  // 8 int16 in every lane
  };
  static Prep prep(const Block& b) {
    const uint64_t biased = unpack_iq4xs_scales(b.scales_l, b.scales_h);
    const __m128i scales16 =
        _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(biased))), _mm_set1_epi16(32));
    return {_mm512_broadcast_i32x4(scales16)};
  }
  static __m512i start(const Prep&, const BlockQ8_K&) { return _mm512_setzero_si512(); }
  // step s: sub-blocks 2s (low half) and 2s + 1 (high half); per 128-bit lane the low
  // nibbles of 16 bytes, then their high nibbles
  static __m512i codes(const Block& b, int s) {
    const __m512i q = _mm512_castsi256_si512(load256(b.qs + 32 * s));
    const __m512i lanes = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i nibble_shift = _mm512_set_epi64(4 * kOnes, 4 * kOnes, 0, 0, 4 * kOnes, 4 * kOnes, 0, 0);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(lanes, nibble_shift), _mm512_set1_epi8(0xF));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(load128(kIq4Values)), idx);
  }
  static __m512i step_scales(const Prep& p, int s) { return scales_32(p.scales, s); }
};

template <typename P>
constexpr bool kSignedCodes = requires { requires P::kSignedCodes; };

// dot_add for signed codes (|a| <= 127, |code| <= 127): maddubs(|a|, code * sign(a)).
template <bool kVnni>
__m512i signed_dot_add(__m512i sum, __m512i codes, const int8_t* q8, __m512i scales) {
  const __m512i y = load512(q8);
  const __m512i signed_codes = _mm512_mask_sub_epi8(codes, _mm512_movepi8_mask(y), _mm512_setzero_si512(), codes);
  const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(y), signed_codes);
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(sum, p, scales);
  } else {
    return _mm512_add_epi32(sum, _mm512_madd_epi16(p, scales));
  }
}

// One super-block column of an R x C tile (R * C == 16): acc += its 16 pair dots.
template <typename P, bool kVnni, int R, int C>
__m512 tile_block(const typename P::Block* const* w, const BlockQ8_K* const* a, __m512 acc) {
  static_assert(R * C == 16, "a tile is 16 pairs");
  __m512i sum[16];
  [[maybe_unused]] __m128i mins[R];
  alignas(64) float dw[16] = {}, da[16] = {};
  [[maybe_unused]] alignas(64) float dmin[16] = {};
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const typename P::Block& b = *w[r];
    const typename P::Prep prep = P::prep(b);
    dw[r] = half_to_float(b.d);
    if constexpr (P::kMins) {
      mins[r] = prep.mins;
      dmin[r] = P::dmin(b);
    }
#pragma GCC unroll 16
    for (int t = 0; t < C; ++t) {
      if constexpr (P::kMins) {
        sum[r * C + t] = _mm512_setzero_si512();
      } else {
        sum[r * C + t] = P::start(prep, *a[t]);
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512i codes = P::codes(b, s);
      const __m512i scales = P::step_scales(prep, s);
#pragma GCC unroll 16
      for (int t = 0; t < C; ++t) {
        if constexpr (kSignedCodes<P>) {
          sum[r * C + t] = signed_dot_add<kVnni>(sum[r * C + t], codes, a[t]->qs + 64 * s, scales);
        } else {
          sum[r * C + t] = dot_add<kVnni>(sum[r * C + t], codes, a[t]->qs + 64 * s, scales);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < C; ++t) da[t] = a[t]->d;
  const __m512 d_a = _mm512_permutexvar_ps(lane_index<C, false>(), _mm512_load_ps(da));
  const __m512 d_w = _mm512_permutexvar_ps(lane_index<C, true>(), _mm512_load_ps(dw));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(sum)), _mm512_mul_ps(d_w, d_a), acc);
  if constexpr (P::kMins) {
    __m128i pairs[C];  // bsum_2j + bsum_2j+1 of each token
#pragma GCC unroll 16
    for (int t = 0; t < C; ++t) pairs[t] = _mm_hadd_epi16(load128(a[t]->bsums), load128(a[t]->bsums + 8));
    __m512i m[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int p = 4 * j;
      const __m512i x = group4(mins[p / C], mins[(p + 1) / C], mins[(p + 2) / C], mins[(p + 3) / C]);
      const __m512i y = group4(pairs[p % C], pairs[(p + 1) % C], pairs[(p + 2) % C], pairs[(p + 3) % C]);
      m[j] = _mm512_madd_epi16(x, y);
    }
    const __m512 d_min = _mm512_permutexvar_ps(lane_index<C, true>(), _mm512_load_ps(dmin));
    acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(fold_groups(m)), _mm512_mul_ps(d_min, d_a), acc);
  }
  return acc;
}

// Where a tile's results go: lane L of acc is pair p = r * C + t of lane_index.
template <int C>
void store_tile(__m512 acc, int rows, int toks, float* y, int64_t y_stride) {
  alignas(64) float out[16];
  _mm512_store_ps(out, acc);
  for (int lane = 0; lane < 16; ++lane) {
    const int p = pair_of_lane(lane), r = p / C, t = p % C;
    if (r < rows && t < toks) y[t * y_stride + r] = out[lane];
  }
}

template <typename P, bool kVnni, int R, int C>
void k_tiles(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
  using Block = typename P::Block;
  const BlockQ8_K* a[C];
  for (int t = 0; t < C; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(pr.act + (t0 + t) * pr.act_stride);
  for (int64_t r = r0; r < r1; r += R) {
    const Block* w[R];
    for (int k = 0; k < R; ++k) {
      w[k] = reinterpret_cast<const Block*>(pr.w + std::min(r + k, pr.n_rows - 1) * pr.w_stride);
    }
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < pr.nb; ++i) {
      const Block* wi[R];
      const BlockQ8_K* ai[C];
      for (int k = 0; k < R; ++k) wi[k] = w[k] + i;
      for (int t = 0; t < C; ++t) ai[t] = a[t] + i;
      acc = tile_block<P, kVnni, R, C>(wi, ai, acc);
    }
    store_tile<C>(acc, static_cast<int>(std::min<int64_t>(R, pr.n_rows - r)), C, pr.y + t0 * pr.y_stride + r,
                  pr.y_stride);
  }
}

template <typename P, bool kVnni>
struct KTiles {
  template <int R, int C>
  struct At {
    static void run(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) { k_tiles<P, kVnni, R, C>(pr, r0, r1, t0); }
  };
};

template <typename P, bool kVnni>
void gemm_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
            int64_t n_tok, float* y, int64_t y_stride) {
  MT_CHECK(n % kQKK == 0);
  if (n_rows <= 0 || n_tok <= 0) return;
  over_tokens<KTiles<P, kVnni>::template At>(problem(n / kQKK, w, w_stride, n_rows, act, act_stride, y, y_stride),
                                             n_tok);
}

template <bool kVnni>
void fill(KernelTable& t) {
  t.gemm[static_cast<int>(QuantType::Q4_K)] = gemm_k<Q45K<BlockQ4_K, false>, kVnni>;
  t.gemm[static_cast<int>(QuantType::Q5_K)] = gemm_k<Q45K<BlockQ5_K, true>, kVnni>;
  t.gemm[static_cast<int>(QuantType::Q6_K)] = gemm_k<Q6K, kVnni>;
  t.gemm[static_cast<int>(QuantType::IQ4_XS)] = gemm_k<IQ4XS, kVnni>;
}

}  // namespace

void register_gemm_avx512(KernelTable& t) {
  if (t.isa == Isa::kAvx512Vnni) {
    fill<true>(t);
  } else {
    fill<false>(t);
  }
  register_gemm_q32_avx512(t);
  // No AVX-512 MXFP4 tile: the AVX2 one (registered below this level) keeps the AVX2
  // one-token dot's order, not this level's dot, so batches use the dot here too and a
  // batch and single tokens still agree bit for bit.
  t.gemm[static_cast<int>(QuantType::MXFP4)] = nullptr;
  for (uint8_t& m : t.gemm_min_tokens) m = 0;  // not measured against AVX2's 4: from 2 tokens, as before
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX-512 kernels

namespace mt::cpu {
void register_gemm_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
