// Prefill tile dots ("GEMM"), AVX2 (+FMA, F16C): y[t * y_stride + r] = vec_dot(weight row
// r, activation row t) for a tile of R rows x C tokens at once, so each weight block is
// unpacked once for C tokens (cpu/kernels.h; the AVX-512 version is gemm_avx512.cpp).
//
// K-quants (Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K), R x C = 8 pairs (2 x 4 for the bulk;
// 4 x 2, 8 x 1 for the last tokens), per super-block and 32 codes at a time, as vec_dot in
// k_quants_avx2.cpp: unsigned codes x int8 activations by maddubs (IQ4_XS: |a| x the
// signed codebook value with a's sign), int16 sub-block scales by madd, summed into
// sum[p], p = r * C + t (8 int32 ymm; Q6_K's -32 offset starts the sum). A hadd tree folds
// the 8 vectors into one whose lane p is pair p's total; Q4_K / Q5_K's min terms fold the
// same way, and acc += S * (d_w * d_a) - M * (dmin_w * d_a).
// 32-element blocks against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL): R x C = 2 x 4 / 4 x 2 / 8 x 1
// float accumulators, one block per step: the block's signed codes (value / d) made once
// per row for C tokens, then the sign trick (maddubs(|w|, sign(a, w))). MXFP4: one row x
// two tokens, four accumulators per pair in its one-token dot's order (q32_rows4).
// The driver walks groups of rows small enough to stay in L2 and, for each token tile,
// the group's row tiles; rows past the end repeat the last row and are not stored.
// The K-quant tiles prefetch each of their rows two super-blocks ahead: a batched decode
// step streams whole matrices (the output matrix) through them once, and without it they
// read memory at a third of the one-token dot's rate (bench/kernels_tokens.cpp).
//
// Invariant: everything here has internal linkage (see cpu/k_quants_scales.h).
#include "cpu/register.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "cpu/k_quants_scales.h"
#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
float half_to_float(half_bits h) { return kFp16ToFp32.v[h]; }
__m128i to_vector(Bytes16 b) { return _mm_set_epi64x(static_cast<int64_t>(b.hi), static_cast<int64_t>(b.lo)); }

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Scale j of 8 int16 scales held in each 128-bit lane, in every int16.
__m256i scale_of(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * j)));
}
// Of the 16 int8 scales in each lane: 2g (sign-extended) in the low lane, 2g + 1 in the high.
__m256i scale_pair(__m256i scale_bytes, int g) {
  const __m256i idx = _mm256_setr_m128i(_mm_set1_epi8(static_cast<char>(2 * g)),
                                        _mm_set1_epi8(static_cast<char>(2 * g + 1)));
  return _mm256_srai_epi16(_mm256_shuffle_epi8(scale_bytes, idx), 8);
}
// Bit `bit` of every byte of `mask`, moved to bit `to`.
__m256i bit_to(__m256i mask, int bit, int to) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(mask, bit), _mm256_set1_epi8(1)), to);
}

// 8 vectors (pair p in vector p) -> lane p the pair's total.
__m256i reduce8(const __m256i v[8]) {
  const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// Lane p -> the row (kRow) or token of pair p in an R x C tile.
struct LaneIndex {
  alignas(32) int32_t v[8];
};
template <int C, bool kRow>
constexpr LaneIndex make_lane_index() {
  LaneIndex x{};
  for (int p = 0; p < 8; ++p) x.v[p] = kRow ? p / C : p % C;
  return x;
}
template <int C, bool kRow>
constexpr LaneIndex kLaneIndex = make_lane_index<C, kRow>();
template <int C, bool kRow>
__m256 spread(const float* values) {
  const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLaneIndex<C, kRow>.v));
  return _mm256_permutevar8x32_ps(_mm256_load_ps(values), idx);
}

// ---- K-quant policies: a block's prepared scales, the 32 codes of step j (0..7, matching
// activation bytes 32j..32j + 31) and that step's int16 scales.

template <typename B, bool kFifthBit>
struct Q45K {
  using Block = B;
  static constexpr bool kMins = true;
  struct Prep {
    __m256i scales;  // 8 int16 in each lane
    __m128i mins;    // 8 int16
  };
  static Prep prep(const Block& b) {
    const __m128i scale_min = to_vector(unpack_k4_scales(b.scales));
    return {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scale_min)), _mm_cvtepu8_epi16(_mm_srli_si128(scale_min, 8))};
  }
  static __m256i codes(const Block& b, int j) {
    const __m256i q = load256(b.qs + 32 * (j / 2));
    __m256i c = _mm256_and_si256(j % 2 == 0 ? q : _mm256_srli_epi16(q, 4), _mm256_set1_epi8(0xF));
    if constexpr (kFifthBit) c = _mm256_or_si256(c, bit_to(load256(b.qh), j, 4));
    return c;
  }
  static __m256i step_scales(const Prep& p, int j) { return scale_of(p.scales, j); }
  static float dmin(const Block& b) { return half_to_float(b.dmin); }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kMins = false;
  struct Prep {
    __m256i scale_bytes;  // the 16 int8 scales in each lane
    __m256i offset16;     // -32 * scale_j
  };
  static Prep prep(const Block& b) {
    const __m128i scales = load128(b.scales);
    const __m256i scales16 = _mm256_cvtepi8_epi16(scales);
    return {_mm256_broadcastsi128_si256(scales),
            _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales16, 5))};
  }
  static __m256i start(const Prep& p, const BlockQ8_K& a) { return _mm256_madd_epi16(p.offset16, load256(a.bsums)); }
  static __m256i codes(const Block& b, int j) {
    const int half = j / 4, k = j % 4;
    const __m256i ql = load256(b.ql + 64 * half + 32 * (k % 2));
    const __m256i qh = load256(b.qh + 32 * half);
    const __m256i low = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0xF));
    __m256i high;
    switch (k) {
      case 0: high = _mm256_slli_epi16(qh, 4); break;
      case 1: high = _mm256_slli_epi16(qh, 2); break;
      case 2: high = qh; break;
      default: high = _mm256_srli_epi16(qh, 2); break;
    }
    return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
  }
  static __m256i step_scales(const Prep& p, int j) { return scale_pair(p.scale_bytes, j); }
};

// IQ4_XS: signed codebook values (-127..113), 8 sub-blocks of 32 with scales ls - 32;
// the activation's sign moves onto the value (kSignedCodes), maddubs takes |a|.
struct IQ4XS {
  using Block = BlockIQ4_XS;
  static constexpr bool kMins = false;
  static constexpr bool kSignedCodes = true;
  struct Prep {
    __m256i scales;  // 8 int16 in each lane
  };
  static Prep prep(const Block& b) {
    const uint64_t biased = unpack_iq4xs_scales(b.scales_l, b.scales_h);
    const __m128i scales16 =
        _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(biased))), _mm_set1_epi16(32));
    return {_mm256_broadcastsi128_si256(scales16)};
  }
  static __m256i start(const Prep&, const BlockQ8_K&) { return _mm256_setzero_si256(); }
  // sub-block j: the low nibbles of 16 bytes, then their high nibbles
  static __m256i codes(const Block& b, int j) {
    const __m128i q = load128(b.qs + 16 * j);
    const __m256i idx = _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), _mm256_set1_epi8(0xF));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kIq4Values)), idx);
  }
  static __m256i step_scales(const Prep& p, int j) { return scale_of(p.scales, j); }
};

template <typename P>
constexpr bool kSignedCodes = requires { requires P::kSignedCodes; };

// One super-block column of an R x C tile (R * C == 8): acc += its 8 pair dots.
template <typename P, int R, int C>
__m256 tile_block(const typename P::Block* const* w, const BlockQ8_K* const* a, __m256 acc) {
  static_assert(R * C == 8, "a tile is 8 pairs");
  __m256i sum[8];
  [[maybe_unused]] __m128i mins[R];
  alignas(32) float dw[8] = {}, da[8] = {};
  [[maybe_unused]] alignas(32) float dmin[8] = {};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const typename P::Block& b = *w[r];
    const typename P::Prep prep = P::prep(b);
    dw[r] = half_to_float(b.d);
    if constexpr (P::kMins) {
      mins[r] = prep.mins;
      dmin[r] = P::dmin(b);
    }
#pragma GCC unroll 8
    for (int t = 0; t < C; ++t) {
      if constexpr (P::kMins) {
        sum[r * C + t] = _mm256_setzero_si256();
      } else {
        sum[r * C + t] = P::start(prep, *a[t]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i codes = P::codes(b, j);
      const __m256i scales = P::step_scales(prep, j);
#pragma GCC unroll 8
      for (int t = 0; t < C; ++t) {
        const __m256i y = load256(a[t]->qs + 32 * j);
        // signed codes: maddubs(|a|, code * sign(a)) (|a| <= 127, |code| <= 127)
        const __m256i p = kSignedCodes<P> ? _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(codes, y))
                                          : _mm256_maddubs_epi16(codes, y);
        sum[r * C + t] = _mm256_add_epi32(sum[r * C + t], _mm256_madd_epi16(p, scales));
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < C; ++t) da[t] = a[t]->d;
  const __m256 d_a = spread<C, false>(da);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(sum)), _mm256_mul_ps(spread<C, true>(dw), d_a), acc);
  if constexpr (P::kMins) {
    __m128i pairs[C];  // bsum_2j + bsum_2j+1 of each token
#pragma GCC unroll 8
    for (int t = 0; t < C; ++t) pairs[t] = _mm_hadd_epi16(load128(a[t]->bsums), load128(a[t]->bsums + 8));
    __m256i m[4];  // m[k]: pair k in the low lane, pair k + 4 in the high (4 partials each)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      m[k] = _mm256_madd_epi16(_mm256_setr_m128i(mins[k / C], mins[(k + 4) / C]),
                               _mm256_setr_m128i(pairs[k % C], pairs[(k + 4) % C]));
    }
    const __m256i mm = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
    acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_mul_ps(spread<C, true>(dmin), d_a), acc);
  }
  return acc;
}

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

template <typename Block>
const Block* row_at(const Problem& pr, int64_t r) {
  return reinterpret_cast<const Block*>(pr.w + std::min(r, pr.n_rows - 1) * pr.w_stride);
}
template <typename Block>
const Block* token_at(const Problem& pr, int64_t t) {
  return reinterpret_cast<const Block*>(pr.act + t * pr.act_stride);
}

template <typename P, int R, int C>
void k_tiles(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
  using Block = typename P::Block;
  const BlockQ8_K* a[C];
  for (int t = 0; t < C; ++t) a[t] = token_at<BlockQ8_K>(pr, t0 + t);
  for (int64_t r = r0; r < r1; r += R) {
    const Block* w[R];
    for (int k = 0; k < R; ++k) w[k] = row_at<Block>(pr, r + k);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < pr.nb; ++i) {
      const Block* wi[R];
      const BlockQ8_K* ai[C];
      for (int k = 0; k < R; ++k) {
        wi[k] = w[k] + i;
        const char* ahead = reinterpret_cast<const char*>(w[k] + i + 2);
        for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
      }
      for (int t = 0; t < C; ++t) ai[t] = a[t] + i;
      acc = tile_block<P, R, C>(wi, ai, acc);
    }
    alignas(32) float out[8];
    _mm256_store_ps(out, acc);
    const int rows = static_cast<int>(std::min<int64_t>(R, pr.n_rows - r));
    for (int k = 0; k < rows; ++k) {
      for (int t = 0; t < C; ++t) pr.y[(t0 + t) * pr.y_stride + r + k] = out[k * C + t];
    }
  }
}

// ---- 32-element blocks against Q8_0: a block's signed codes (value / d), |code| <= 127
// except IQ4_NL's -127..113 (the sign trick needs |w| <= 128).

// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31).
__m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = load128(qs);
  return _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), _mm256_set1_epi8(0x0F));
}

struct Q8_0W {
  using Block = BlockQ8_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static __m256i codes(const Block& b) { return load256(b.qs); }
};
struct Q4_0W {
  using Block = BlockQ4_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static __m256i codes(const Block& b) { return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8)); }
};
struct Q5_0W {
  using Block = BlockQ5_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  // code - 16 = nibble | (fifth bit << 4) - 16 = nibble - 16 where the fifth bit is clear
  static __m256i codes(const Block& b) {
    const uint32_t bits = load_qh(b.qh);
    const __m256i byte_of = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));  // bit j % 8
    const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), _mm256_setzero_si256());  // 0xFF: no bit
    return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_and_si256(clear, _mm256_set1_epi8(16)));
  }
};
struct IQ4_NLW {
  using Block = BlockIQ4_NL;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static __m256i codes(const Block& b) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kIq4Values)), unpack_nibbles(b.qs));
  }
};

struct MXFP4W {  // codes 2 x the FP4 value (|code| <= 12), scale the E8M0 half scale
  using Block = BlockMXFP4;
  static float scale(const Block& b) { return kE8m0HalfToFp32.v[b.e]; }
  static __m256i codes(const Block& b) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(kFp4x2Values)), unpack_nibbles(b.qs));
  }
};

// acc + one (weight block, token block) pair's dot: the sign trick on the weight's codes q
// (abs_q = |q|), the int32 lanes to float, times dw * the token's scale da. q32_tiles and
// q32_rows4 both step through it, so their numbers equal the one-token dots'.
inline __m256 pair_step(__m256i q, __m256i abs_q, __m256 dw, const BlockQ8_0& a, __m256 da, __m256 acc) {
  const __m256i p = _mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(load256(a.qs), q));
  const __m256 ints = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  return _mm256_fmadd_ps(ints, _mm256_mul_ps(dw, da), acc);
}

// One block per step, float accumulators per pair; the sign trick (maddubs(|w|, sign(a,
// w))) with |w| and the weight scale made once per row for C tokens.
template <typename P, int R, int C>
void q32_tiles(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
  using Block = typename P::Block;
  const BlockQ8_0* a[C];
  for (int t = 0; t < C; ++t) a[t] = token_at<BlockQ8_0>(pr, t0 + t);
  for (int64_t r = r0; r < r1; r += R) {
    const Block* w[R];
    for (int k = 0; k < R; ++k) w[k] = row_at<Block>(pr, r + k);
    __m256 acc[R * C];
    for (auto& v : acc) v = _mm256_setzero_ps();
    for (int64_t i = 0; i < pr.nb; ++i) {
      __m256 da[C];
#pragma GCC unroll 8
      for (int t = 0; t < C; ++t) da[t] = _mm256_broadcast_ss(&kFp16ToFp32.v[a[t][i].d]);
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) {
        const __m256i q = P::codes(w[k][i]);
        const __m256i abs_q = _mm256_abs_epi8(q);
        const __m256 dw = _mm256_set1_ps(P::scale(w[k][i]));
#pragma GCC unroll 8
        for (int t = 0; t < C; ++t) acc[k * C + t] = pair_step(q, abs_q, dw, a[t][i], da[t], acc[k * C + t]);
      }
    }
    const int rows = static_cast<int>(std::min<int64_t>(R, pr.n_rows - r));
    for (int k = 0; k < rows; ++k) {
      for (int t = 0; t < C; ++t) pr.y[(t0 + t) * pr.y_stride + r + k] = hsum(acc[k * C + t]);
    }
  }
}

// MXFP4's one-token dot (simple_avx2.cpp dot_blocks_pairs) spreads the blocks over four
// accumulators, block i into i % 4 and the blocks past the last four into the first, then
// (a0 + a1) + (a2 + a3): its decode was bound by one fmadd chain. The tile keeps that
// order per (row, token) so a batch and single tokens agree bit for bit: one row and up to
// two tokens at a time (4 x C accumulators), each block's codes made once for the tokens.
template <typename P, int C>
void q32_rows4(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
  using Block = typename P::Block;
  const BlockQ8_0* a[C];
  for (int t = 0; t < C; ++t) a[t] = token_at<BlockQ8_0>(pr, t0 + t);
  const int64_t full = pr.nb / 4 * 4;
  for (int64_t r = r0; r < r1; ++r) {
    const Block* w = row_at<Block>(pr, r);
    __m256 acc[C][4];
    for (int t = 0; t < C; ++t) {
      for (auto& v : acc[t]) v = _mm256_setzero_ps();
    }
    auto step = [&](int64_t i, int j) {
      const __m256i q = P::codes(w[i]);
      const __m256i abs_q = _mm256_abs_epi8(q);
      const __m256 dw = _mm256_set1_ps(P::scale(w[i]));
#pragma GCC unroll 2
      for (int t = 0; t < C; ++t) {
        acc[t][j] = pair_step(q, abs_q, dw, a[t][i], _mm256_broadcast_ss(&kFp16ToFp32.v[a[t][i].d]), acc[t][j]);
      }
    };
    for (int64_t i = 0; i < full; i += 4) {
      step(i, 0);
      step(i + 1, 1);
      step(i + 2, 2);
      step(i + 3, 3);
    }
    for (int64_t i = full; i < pr.nb; ++i) step(i, 0);
    for (int t = 0; t < C; ++t) {
      pr.y[(t0 + t) * pr.y_stride + r] =
          hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
    }
  }
}

// Rows per group: the group's weights (about 256 KiB) stay in L2 while the token tiles
// pass; a multiple of 8, so only the last group has a partial row tile.
int64_t row_group(size_t w_stride) {
  const int64_t rows = static_cast<int64_t>((size_t{256} << 10) / std::max<size_t>(w_stride, 1));
  return std::max<int64_t>(8, rows / 8 * 8);
}

// The token tiles of each row group: 4 tokens at a time (2 rows), then 2 (4 rows), 1 (8).
template <typename Tiles>
void over_tokens(const Problem& pr, int64_t n_tok) {
  const int64_t group = row_group(pr.w_stride);
  for (int64_t r0 = 0; r0 < pr.n_rows; r0 += group) {
    const int64_t r1 = std::min(pr.n_rows, r0 + group);
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tok; t0 += 4) Tiles::template run<2, 4>(pr, r0, r1, t0);
    if (t0 + 2 <= n_tok) Tiles::template run<4, 2>(pr, r0, r1, t0), t0 += 2;
    if (t0 < n_tok) Tiles::template run<8, 1>(pr, r0, r1, t0);
  }
}

template <typename P>
struct KTiles {
  template <int R, int C>
  static void run(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
    k_tiles<P, R, C>(pr, r0, r1, t0);
  }
};
template <typename P>
struct Q32Tiles {
  template <int R, int C>
  static void run(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
    q32_tiles<P, R, C>(pr, r0, r1, t0);
  }
};

// q32_rows4 for the driver's R x C tiles: its rows one by one, the C tokens two at a time.
template <typename P>
struct Q32Tiles4 {
  template <int R, int C>
  static void run(const Problem& pr, int64_t r0, int64_t r1, int64_t t0) {
    int64_t t = t0;
    for (; t + 2 <= t0 + C; t += 2) q32_rows4<P, 2>(pr, r0, r1, t);
    if (t < t0 + C) q32_rows4<P, 1>(pr, r0, r1, t);
  }
};

template <typename Tiles, int kBlock>
void gemm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
          int64_t n_tok, float* y, int64_t y_stride) {
  MT_CHECK(n % kBlock == 0);
  if (n_rows <= 0 || n_tok <= 0) return;
  const Problem pr{n / kBlock, static_cast<const uint8_t*>(w), w_stride, n_rows, static_cast<const uint8_t*>(act),
                   act_stride, y, y_stride};
  over_tokens<Tiles>(pr, n_tok);
}

}  // namespace

void register_gemm_avx2(KernelTable& t) {
  t.gemm[static_cast<int>(QuantType::Q4_K)] = gemm<KTiles<Q45K<BlockQ4_K, false>>, kQKK>;
  t.gemm[static_cast<int>(QuantType::Q5_K)] = gemm<KTiles<Q45K<BlockQ5_K, true>>, kQKK>;
  t.gemm[static_cast<int>(QuantType::Q6_K)] = gemm<KTiles<Q6K>, kQKK>;
  t.gemm[static_cast<int>(QuantType::IQ4_XS)] = gemm<KTiles<IQ4XS>, kQKK>;
  t.gemm[static_cast<int>(QuantType::Q8_0)] = gemm<Q32Tiles<Q8_0W>, kQK32>;
  t.gemm[static_cast<int>(QuantType::Q4_0)] = gemm<Q32Tiles<Q4_0W>, kQK32>;
  t.gemm[static_cast<int>(QuantType::Q5_0)] = gemm<Q32Tiles<Q5_0W>, kQK32>;
  t.gemm[static_cast<int>(QuantType::IQ4_NL)] = gemm<Q32Tiles<IQ4_NLW>, kQK32>;
  t.gemm[static_cast<int>(QuantType::MXFP4)] = gemm<Q32Tiles4<MXFP4W>, kQK32>;
  // 2-3 tokens of a K-quant: the one-token dot per pair streams the rows faster (a 2 x 4
  // tile needs 4 tokens; at 2-3 the driver's 4 x 2 / 8 x 1 tiles pass the rows twice).
  for (QuantType k : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::IQ4_XS}) {
    t.gemm_min_tokens[static_cast<int>(k)] = 4;
  }
}

}  // namespace mt::cpu

#else  // not x86-64: no AVX2 kernels

namespace mt::cpu {
void register_gemm_avx2(KernelTable&) {}
}  // namespace mt::cpu

#endif
