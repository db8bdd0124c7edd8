// Internal to quant/: the scalar helpers and scale searches the reference quantizers
// share, and the per-block quantizer declarations the dispatcher calls.
//
// Invariant: every integer code leaves these helpers already clamped to its range, and
// a degenerate group (all zero, values too small for the scale to be representable)
// yields scale 0, so no input can cause an out-of-range float -> int conversion or a
// NaN scale. For ordinary input they compute exactly what ggml's reference code does,
// in the same float32 operation order.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "quant/blocks.h"

namespace mt::quant_internal {

// Groups whose largest magnitude is below this quantize to zero (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;
// The largest group a scale search handles (K-quant sub-blocks are 16 or 32).
inline constexpr int kMaxGroup = 32;

// Round to nearest, ties to even, exact for |v| < 2^22. Outside that range the value
// is meaningless (callers clamp it) but never undefined.
inline int nearest_int(float v) {
  const float biased = v + 12582912.f;  // 1.5 * 2^23: the mantissa now holds the integer
  return static_cast<int>(std::bit_cast<uint32_t>(biased) & 0x007fffffu) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// 1 / d, or 0 when d is zero or the reciprocal is not finite.
inline float inverse_or_zero(float d) {
  if (d == 0.f) return 0.f;
  const float r = 1.f / d;
  return std::isfinite(r) ? r : 0.f;
}

// Truncation toward zero clamped to [0, hi] (a C cast of a value >= 0); NaN gives 0.
inline int trunc_clamped(float v, int hi) {
  if (!(v > 0.f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// roundf (ties away from zero) clamped to [-hi, hi]; NaN gives 0.
inline int round_clamped(float v, int hi) {
  const float r = std::round(v);
  if (!(r == r)) return 0;
  return static_cast<int>(std::clamp(r, static_cast<float>(-hi), static_cast<float>(hi)));
}

// Index of the entry of the ascending table `values` (n entries) nearest to x; a tie
// between two neighbours goes to the upper one.
inline int best_index_int8(int n, const int8_t* values, float x) {
  if (x <= values[0]) return 0;
  if (x >= values[n - 1]) return n - 1;
  int lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < values[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - values[hi - 1] < values[hi] - x ? hi - 1 : hi;
}

// The largest |x[i]| and its signed value (the first on ties); zeros when all are zero.
struct AbsMax {
  float amax = 0.f;  // the magnitude
  float max = 0.f;   // the signed value that has it
};
inline AbsMax abs_max(const float* x, int n) {
  AbsMax r;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > r.amax) {
      r.amax = ax;
      r.max = x[i];
    }
  }
  return r;
}

// Affine search (ggml's make_qkx2_quants): x ~ scale * L - neg_min with L in [0, nmax],
// minimising the weighted error over a sweep of candidate scales.
struct AffineSearch {
  int nmax;      // largest code
  float rmin;    // first candidate: (nmax + rmin) / (max - min)
  float rdelta;  // step added to rmin per candidate
  int nstep;     // number of extra candidates (0: only the plain min/max scale)
  bool use_mad;  // weighted |error| instead of weighted error^2
};
float search_affine(const float* x, const float* weights, int n, const AffineSearch& p,
                    uint8_t* L, float* neg_min);

// Symmetric search weighted by x^2 (ggml's make_qx_quants, rmse_type 1):
// x ~ scale * (L - nmax), L in [0, 2 nmax). Returns the scale (0 for a zero group).
float search_symmetric(const float* x, int n, int nmax, int8_t* L);

// Symmetric search refined one element at a time (ggml's make_q3_quants with rmse):
// x ~ scale * (L - nmax), L in [0, 2 nmax).
float search_symmetric_refine(const float* x, int n, int nmax, int8_t* L);

// Per-block reference quantizers: x points at Block::kElems floats.
void quantize_block(const float* x, BlockQ4_0* y);
void quantize_block(const float* x, BlockQ4_1* y);
void quantize_block(const float* x, BlockQ5_0* y);
void quantize_block(const float* x, BlockQ5_1* y);
void quantize_block(const float* x, BlockQ8_0* y);
void quantize_block(const float* x, BlockQ8_1* y);
void quantize_block(const float* x, BlockQ2_K* y);
void quantize_block(const float* x, BlockQ3_K* y);
void quantize_block(const float* x, BlockQ4_K* y);
void quantize_block(const float* x, BlockQ5_K* y);
void quantize_block(const float* x, BlockQ6_K* y);
void quantize_block(const float* x, BlockQ8_K* y);
void quantize_block(const float* x, BlockIQ4_NL* y);
void quantize_block(const float* x, BlockIQ4_XS* y);
void quantize_block(const float* x, BlockMXFP4* y);

}  // namespace mt::quant_internal
