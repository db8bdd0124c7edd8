// The tile driver shared by the AVX-512 prefill tile dots (cpu/gemm_avx512.cpp: K-quants;
// cpu/gemm_avx512_q32.cpp: 32-element blocks): a problem (rows x tokens of one matrix),
// row groups small enough to stay in L2, and the token tiles of each group, 8 tokens at a
// time, then 4, 2, 1. Include only from translation units compiled with the AVX-512 flags;
// everything here has internal linkage (cpu/k_quants_scales.h says why).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/scale_tables.h"
#include "quant/blocks.h"

namespace mt::cpu {
namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline float half_to_float(half_bits h) { return kFp16ToFp32.v[h]; }

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

// Rows per group: the group's weights (about 256 KiB) stay in L2 while the token tiles
// pass; a multiple of 16, so only the last group has a partial row tile.
inline int64_t row_group(size_t w_stride) {
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

inline Problem problem(int64_t nb, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
                float* y, int64_t y_stride) {
  return {nb, static_cast<const uint8_t*>(w), w_stride, n_rows, static_cast<const uint8_t*>(act), act_stride, y,
          y_stride};
}

}  // namespace
}  // namespace mt::cpu
