// Q4_K x8 tile kernel, AVX-512 VNNI: 8 interleaved rows (cpu/repack.h) x a tile of up to 4
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

void gemm_q4_k_x8(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
                  int64_t n_tok, float* y, int64_t y_stride) {
  MT_CHECK(n % kQKK == 0 && n_rows % kInterleave == 0);
  const int64_t nb = n / kQKK;
  const auto* act_bytes = static_cast<const uint8_t*>(act);
  for (int64_t g = 0; g < n_rows / kInterleave; ++g) {
    const auto* blocks = reinterpret_cast<const BlockQ4_Kx8*>(static_cast<const uint8_t*>(w) + g * w_stride);
    float* yg = y + g * kInterleave;
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4) tile<4>(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride);
    switch (n_tok - t) {
      case 3: tile<3>(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      case 2: tile<2>(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      case 1: tile<1>(nb, blocks, act_bytes + t * act_stride, act_stride, yg + t * y_stride, y_stride); break;
      default: break;
    }
  }
}

}  // namespace

void register_repack_avx512(KernelTable& t) {
  if (t.isa == Isa::kAvx512Vnni) t.gemm_x8[static_cast<int>(QuantType::Q4_K)] = gemm_q4_k_x8;
}

}  // namespace mt::cpu

#else

namespace mt::cpu {
void register_repack_avx512(KernelTable&) {}
}  // namespace mt::cpu

#endif
