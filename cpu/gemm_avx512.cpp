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
#include "cpu/k_quants_scales.h"
#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

__m512i load512(const void* p) { return _mm512_loadu_si512(p); }
__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
float half_to_float(half_bits h) { return kFp16ToFp32.v[h]; }
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

// Rows [r0, r1) x tokens [t0, t0 + C) in R x C tiles; rows past n_rows repeat the last.
struct Problem {
  int64_t nb;  // blocks per row
  const uint8_t* w;
  size_t w_stride;
  int64_t n_rows;
  const uint8_t* act;
  size_t act_stride;
  float* y;
  int64_t y_stride;
};

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

// Rows per group: the group's weights (about 256 KiB) stay in L2 while the token tiles
// pass; a multiple of 16, so only the last group has a partial row tile.
int64_t row_group(size_t w_stride) {
  const int64_t rows = static_cast<int64_t>((size_t{256} << 10) / std::max<size_t>(w_stride, 1));
  return std::max<int64_t>(16, rows / 16 * 16);
}

// The token tiles of one row group: 8 at a time, then 4, 2, 1.
template <template <int, int> class Tiles>
void over_tokens(const Problem& pr, int64_t n_tok) {
  const int64_t group = row_group(pr.w_stride);
  for (int64_t r0 = 0; r0 < pr.n_rows; r0 += group) {
    const int64_t r1 = std::min(pr.n_rows, r0 + group);
    int64_t t0 = 0;
    for (; t0 + 8 <= n_tok; t0 += 8) Tiles<2, 8>::run(pr, r0, r1, t0);
    if (t0 + 4 <= n_tok) Tiles<4, 4>::run(pr, r0, r1, t0), t0 += 4;
    if (t0 + 2 <= n_tok) Tiles<8, 2>::run(pr, r0, r1, t0), t0 += 2;
    if (t0 < n_tok) Tiles<16, 1>::run(pr, r0, r1, t0);
  }
}

Problem problem(int64_t nb, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
                float* y, int64_t y_stride) {
  return {nb, static_cast<const uint8_t*>(w), w_stride, n_rows, static_cast<const uint8_t*>(act), act_stride, y,
          y_stride};
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

template <bool kVnni>
void fill(KernelTable& t) {
  t.gemm[static_cast<int>(QuantType::Q4_K)] = gemm_k<Q45K<BlockQ4_K, false>, kVnni>;
  t.gemm[static_cast<int>(QuantType::Q5_K)] = gemm_k<Q45K<BlockQ5_K, true>, kVnni>;
  t.gemm[static_cast<int>(QuantType::Q6_K)] = gemm_k<Q6K, kVnni>;
  t.gemm[static_cast<int>(QuantType::IQ4_XS)] = gemm_k<IQ4XS, kVnni>;
  // no VNNI: only codes of at most 16 in magnitude (Q8_0, IQ4_NL keep the AVX2 entries)
  t.gemm[static_cast<int>(QuantType::Q4_0)] = gemm_q32<Q4_0W, kVnni>;
  t.gemm[static_cast<int>(QuantType::Q5_0)] = gemm_q32<Q5_0W, kVnni>;
  if constexpr (kVnni) {
    t.gemm[static_cast<int>(QuantType::Q8_0)] = gemm_q32<Q8_0W, kVnni>;
    t.gemm[static_cast<int>(QuantType::IQ4_NL)] = gemm_q32<IQ4_NLW, kVnni>;
  }
}

}  // namespace

void register_gemm_avx512(KernelTable& t) {
  if (t.isa == Isa::kAvx512Vnni) {
    fill<true>(t);
  } else {
    fill<false>(t);
  }
  // No AVX-512 MXFP4 tile: the AVX2 one (registered below this level) keeps the AVX2
  // one-token dot's order, not this level's dot, so batches use the dot here too and a
  // batch and single tokens still agree bit for bit.
  t.gemm[static_cast<int>(QuantType::MXFP4)] = nullptr;
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX-512 kernels

namespace mt::cpu {
void register_gemm_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
