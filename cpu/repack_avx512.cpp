// Interleaved (x8) tile kernels, AVX-512 VNNI. Q4_K x8: 8 interleaved rows (cpu/repack.h) x a tile of up to 4
// tokens' Q8_K rows per pass.
//
// Per super-block and 64-element chunk c, four 64-byte loads give (low nibbles) the codes
// of sub-block 2c and (high nibbles) of 2c + 1 for all 8 rows; each token then needs one
// vpdpbusd per 8 codes x 8 rows (unsigned codes x its 8 broadcast activation bytes), so
// the unpacking and the scale preparation are paid once for the whole token tile. Float
// accumulators keep row m in lanes 2m and 2m + 1 (the two halves of its 8 codes), folded
// once at the end. The min term dmin * min_j * sum(activations of sub-block j) comes from
// the Q8_K bsums through two vpdpwssd per token and super-block.
// Each token's arithmetic is the same whatever the tile size, so a batch and single
// tokens give bit-identical results.
#include "cpu/register.h"

#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "core/check.h"
#include "cpu/repack.h"

namespace mt::cpu {
namespace {

__m512i load512(const void* p) { return _mm512_loadu_si512(p); }
__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 8 values (lane m) -> 16 lanes (lanes 2m and 2m + 1 = value m).
__m512i dup_lanes(__m256i v) {
  const __m512i idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(v));
}
__m512 dup_lanes_ps(__m256 v) { return _mm512_castsi512_ps(dup_lanes(_mm256_castps_si256(v))); }

// Byte j (0..3) of every int32 lane, zero-extended (vpshufb indexes within 128-bit lanes).
__m512i byte_of_lanes(__m512i v, int j) {
  const int b = static_cast<int>(0x80808000u) | j;
  const __m512i sel = _mm512_add_epi32(_mm512_set1_epi32(b), _mm512_set4_epi32(12, 8, 4, 0));
  return _mm512_shuffle_epi8(v, sel);
}

template <int C>
void tile(int64_t nb, const BlockQ4_Kx8* w, const uint8_t* act, size_t act_stride, float* y, int64_t y_stride) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), m4 = _mm256_set1_epi32(0x0f0f0f0f), hi2 = _mm256_set1_epi32(0x30303030);
  // Pair layouts of the mins for the two vpdpwssd: A lane 2m = (min_m0, min_m1), lane 2m + 1
  // = (min_m4, min_m5); B lane 2m = (min_m2, min_m3), lane 2m + 1 = (min_m6, min_m7).
  const __m512i pick_a = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  const __m512i pick_b = _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3, 17, 1);
  const BlockQ8_K* a[C];
  for (int t = 0; t < C; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  __m512 acc[C];
  for (int t = 0; t < C; ++t) acc[t] = _mm512_setzero_ps();

  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_Kx8& b = w[i];
    const __m256i u0 = load256(b.scales[0]), u1 = load256(b.scales[1]), u2 = load256(b.scales[2]);
    const __m256i sc03 = _mm256_and_si256(u0, m6);
    const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(u0, 2), hi2));
    const __m256i mn03 = _mm256_and_si256(u1, m6);
    const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4), _mm256_and_si256(_mm256_srli_epi32(u1, 2), hi2));
    const __m512i sc03d = dup_lanes(sc03), sc47d = dup_lanes(sc47);
    const __m512 d = dup_lanes_ps(_mm256_cvtph_ps(load128(b.d)));
    const __m512 dmin = dup_lanes_ps(_mm256_cvtph_ps(load128(b.dmin)));
    // mins as int16: lane (64-bit) m of w03 = min_m0..3, of w47 = min_m4..7.
    const __m512i w03 = _mm512_cvtepu8_epi16(mn03), w47 = _mm512_cvtepu8_epi16(mn47);
    const __m512i mins_a = _mm512_permutex2var_epi32(w03, pick_a, w47);
    const __m512i mins_b = _mm512_permutex2var_epi32(w03, pick_b, w47);

    __m512 part[C];
    for (int t = 0; t < C; ++t) part[t] = _mm512_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      __m512i lo[4], hi[4];
      for (int s = 0; s < 4; ++s) {
        const __m512i q = load512(b.qs[c][s]);
        lo[s] = _mm512_and_si512(q, low4);
        hi[s] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
      }
      // d_m * scale of sub-blocks 2c and 2c + 1 in lanes 2m, 2m + 1.
      const __m512i scw = c < 2 ? sc03d : sc47d;
      const __m512 s_lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(byte_of_lanes(scw, (2 * c) % 4)));
      const __m512 s_hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(byte_of_lanes(scw, (2 * c + 1) % 4)));
      for (int t = 0; t < C; ++t) {
        const int8_t* x = a[t][i].qs + 64 * c;
        __m512i sum_lo = _mm512_setzero_si512(), sum_hi = _mm512_setzero_si512();
        for (int s = 0; s < 4; ++s) {
          int64_t xl, xh;
          __builtin_memcpy(&xl, x + 8 * s, 8);
          __builtin_memcpy(&xh, x + 32 + 8 * s, 8);
          sum_lo = _mm512_dpbusd_epi32(sum_lo, lo[s], _mm512_set1_epi64(xl));
          sum_hi = _mm512_dpbusd_epi32(sum_hi, hi[s], _mm512_set1_epi64(xh));
        }
        part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum_lo), s_lo, part[t]);
        part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum_hi), s_hi, part[t]);
      }
    }
    for (int t = 0; t < C; ++t) {
      // Sub-block sums of the activations: pair j = bsums[2j] + bsums[2j + 1].
      const __m128i bs = _mm_hadd_epi16(load128(a[t][i].bsums), load128(a[t][i].bsums + 8));
      const __m512i bs_a = _mm512_broadcastq_epi64(_mm_shuffle_epi32(bs, _MM_SHUFFLE(2, 0, 2, 0)));
      const __m512i bs_b = _mm512_broadcastq_epi64(_mm_shuffle_epi32(bs, _MM_SHUFFLE(3, 1, 3, 1)));
      const __m512i msum = _mm512_dpwssd_epi32(_mm512_madd_epi16(mins_a, bs_a), mins_b, bs_b);
      const __m512 da = _mm512_set1_ps(a[t][i].d);
      acc[t] = _mm512_fmadd_ps(part[t], da, acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, da), acc[t]);
    }
  }
  // Row m = lane 2m + lane 2m + 1.
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int t = 0; t < C; ++t) {
    const __m512 sum = _mm512_add_ps(_mm512_permutexvar_ps(even, acc[t]), _mm512_permutexvar_ps(odd, acc[t]));
    _mm256_storeu_ps(y + t * y_stride, _mm512_castps512_ps256(sum));
  }
}

// Q6_K x8: codes 0..63 (value + 32) as unsigned bytes; maddubs with the activations gives
// int16 pair sums (at most 2 * 63 * 128, no saturation), vpdpwssd applies the int16
// scale of each 16-element sub-block, so a super-block ends in one int32 sum per lane.
// The -32 offset is -32 * sum_j scale_j * bsum_j, per row through four vpdpwssd on the
// scales' pair layout.
template <int C>
void tile_q6(int64_t nb, const BlockQ6_Kx8* w, const uint8_t* act, size_t act_stride, float* y, int64_t y_stride) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  // int16 lane 4m + i of sub-block (2p + k)'s scales = scales[p][m][k]: index 16 (p % 2) + 2m + k
  // within the 32 int16 of pairs {2q, 2q + 1}, q = p / 2.
  const __m512i scale_base = _mm512_set_epi16(14, 14, 14, 14, 12, 12, 12, 12, 10, 10, 10, 10, 8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 4, 4,
                                              2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i lo_half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const BlockQ8_K* a[C];
  for (int t = 0; t < C; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  __m512 acc[C], acc_ofs[C];
  for (int t = 0; t < C; ++t) acc[t] = acc_ofs[t] = _mm512_setzero_ps();

  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_Kx8& b = w[i];
    const __m256 d8 = _mm256_cvtph_ps(load128(b.d));
    const __m512 d_pairs = dup_lanes_ps(d8);                       // lanes 2m, 2m + 1: d_m
    const __m512 d_twice = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(d8)));  // lanes m, 8 + m
    __m512i z[4];  // int16 scales of sub-block pairs {2q, 2q + 1}
    for (int q = 0; q < 4; ++q) z[q] = _mm512_cvtepi8_epi16(load256(b.scales[2 * q]));
    __m512i isum[C];
    for (int t = 0; t < C; ++t) {
      // Offset: lanes m (even pairs) and 8 + m (odd pairs) of sum_p scales(2p, 2p+1) . bsums(2p, 2p+1).
      const __m512i bs = _mm512_castsi256_si512(load256(a[t][i].bsums));
      __m512i ofs = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        const __m512i pick = _mm512_add_epi32(lo_half, _mm512_set1_epi32(2 * q));
        ofs = _mm512_dpwssd_epi32(ofs, z[q], _mm512_permutexvar_epi32(pick, bs));
      }
      const __m512 da = _mm512_set1_ps(a[t][i].d);
      acc_ofs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ofs), _mm512_mul_ps(d_twice, da), acc_ofs[t]);
      isum[t] = _mm512_setzero_si512();
    }
    __m512i scale16[16];  // sub-block j's int16 scale in lanes 4m .. 4m + 3
    for (int j = 0; j < 16; ++j) {
      const int p = j / 2, k = j % 2;
      scale16[j] = _mm512_permutexvar_epi16(_mm512_add_epi16(scale_base, _mm512_set1_epi16(static_cast<int16_t>(16 * (p % 2) + k))), z[p / 2]);
    }
    for (int n = 0; n < 2; ++n) {
      for (int s = 0; s < 4; ++s) {
        const __m512i qa = load512(b.q[n][s][0]), qb = load512(b.q[n][s][1]), qh = load512(b.q[n][s][2]);
        __m512i codes[4];
        codes[0] = _mm512_ternarylogic_epi32(qa, _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45), low4, 0xEC);
        codes[1] = _mm512_ternarylogic_epi32(qb, _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45), low4, 0xEC);
        codes[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qa, 4), _mm512_and_si512(qh, bits45), low4, 0xEC);
        codes[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qb, 4), _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45), low4, 0xEC);
        for (int q = 0; q < 4; ++q) {
          const __m512i sc = scale16[8 * n + 2 * q + s / 2];  // sub-block of elements 128n + 32q + 8s ..
          for (int t = 0; t < C; ++t) {
            int64_t x;
            __builtin_memcpy(&x, a[t][i].qs + 128 * n + 32 * q + 8 * s, 8);
            isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(codes[q], _mm512_set1_epi64(x)), sc);
          }
        }
      }
    }
    for (int t = 0; t < C; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d_pairs, _mm512_set1_ps(a[t][i].d)), acc[t]);
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int t = 0; t < C; ++t) {
    const __m512 sum = _mm512_add_ps(_mm512_permutexvar_ps(even, acc[t]), _mm512_permutexvar_ps(odd, acc[t]));
    const __m256 ofs = _mm256_add_ps(_mm512_castps512_ps256(acc_ofs[t]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc_ofs[t]), 1)));
    _mm256_storeu_ps(y + t * y_stride, _mm256_fnmadd_ps(_mm256_set1_ps(32.0f), ofs, _mm512_castps512_ps256(sum)));
  }
}

template <typename Group, void (*kTile1)(int64_t, const Group*, const uint8_t*, size_t, float*, int64_t),
          void (*kTile2)(int64_t, const Group*, const uint8_t*, size_t, float*, int64_t),
          void (*kTile3)(int64_t, const Group*, const uint8_t*, size_t, float*, int64_t),
          void (*kTile4)(int64_t, const Group*, const uint8_t*, size_t, float*, int64_t)>
void gemm_x8(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride, int64_t n_tok,
             float* y, int64_t y_stride) {
  MT_CHECK(n % kQKK == 0 && n_rows % kInterleave == 0);
  const int64_t nb = n / kQKK;
  const auto* act_bytes = static_cast<const uint8_t*>(act);
  for (int64_t g = 0; g < n_rows / kInterleave; ++g) {
    const auto* blocks = reinterpret_cast<const Group*>(static_cast<const uint8_t*>(w) + g * w_stride);
    float* yg = y + g * kInterleave;
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4) kTile4(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride);
    switch (n_tok - t) {
      case 3: kTile3(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      case 2: kTile2(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      case 1: kTile1(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      default: break;
    }
  }
}

}  // namespace

void register_repack_avx512(KernelTable& t) {
  if (t.isa != Isa::kAvx512Vnni) return;
  t.gemm_x8[static_cast<int>(QuantType::Q4_K)] = gemm_x8<BlockQ4_Kx8, tile<1>, tile<2>, tile<3>, tile<4>>;
  t.gemm_x8[static_cast<int>(QuantType::Q6_K)] = gemm_x8<BlockQ6_Kx8, tile_q6<1>, tile_q6<2>, tile_q6<3>, tile_q6<4>>;
}

}  // namespace mt::cpu

#else

namespace mt::cpu {
void register_repack_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
