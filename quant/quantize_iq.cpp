// Reference quantizers of the table-based 4-bit formats, as ggml's _ref functions:
// IQ4_XS searches the best scale of each 32 elements over the non-linear codebook (15
// candidates, weights x^2) and then quantizes those scales to 6 bits; IQ4_NL (ggml's
// quantize_row_iq4_nl_ref, ntry = -1) makes a single least-squares fit of the codes
// chosen at scale max / -127; MXFP4 takes a power-of-two block scale from the largest
// magnitude and the nearest FP4 value per element.
#include <bit>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quantize_util.h"

namespace mt::quant_internal {
namespace {

constexpr int kIq4Tries = 7;  // candidate inverse scales (values[0] + t) / max, |t| <= 7

// Weighted fit of one candidate: sum w q x and sum w q^2 with q the table values.
struct Iq4Fit {
  float sumqx = 0;
  float sumq2 = 0;
};
Iq4Fit iq4_fit(const float* x, const float* w, float id) {
  Iq4Fit f;
  for (int j = 0; j < 32; ++j) {
    const float q = kIq4Values[best_index_int8(16, kIq4Values, id * x[j])];
    f.sumqx += w[j] * q * x[j];
    f.sumq2 += w[j] * q * q;
  }
  return f;
}

// The least-squares scale of one group of 32 over the IQ4 table (0 for a zero group).
float iq4_group_scale(const float* x) {
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = x[j] * x[j];
  const AbsMax am = abs_max(x, 32);
  if (am.amax < kGroupMaxEps) return 0.f;
  const float values0 = kIq4Values[0];
  Iq4Fit f = iq4_fit(x, w, 1 / (-am.max / values0));
  float d = f.sumq2 > 0 ? f.sumqx / f.sumq2 : 0.f;
  float best = d * f.sumqx;
  for (int t = -kIq4Tries; t <= kIq4Tries; ++t) {
    f = iq4_fit(x, w, static_cast<float>(t + kIq4Values[0]) / am.max);
    if (f.sumq2 > 0 && f.sumqx * f.sumqx > best * f.sumq2) {
      d = f.sumqx / f.sumq2;
      best = d * f.sumqx;
    }
  }
  return d;
}

// Codes of 32 elements for inverse scale id, packed Q4_0-style into 16 bytes.
void iq4_pack(const float* x, float id, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) {
    const int lo = best_index_int8(16, kIq4Values, id * x[j]);
    const int hi = best_index_int8(16, kIq4Values, id * x[j + 16]);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Nearest doubled-FP4 value to x at half-scale d; the first index wins a tie.
int best_index_fp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kFp4x2Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kFp4x2Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void quantize_block(const float* x, BlockIQ4_NL* y) {
  const AbsMax am = abs_max(x, kQK32);
  if (am.amax < kGroupMaxEps) {
    // Any code decodes to 0 under d = 0; ggml leaves the previous block's codes here,
    // we write code 8 (the table value nearest 0).
    y->d = fp32_to_fp16(0.f);
    std::memset(y->qs, 0x88, sizeof(y->qs));
    return;
  }
  float w[kQK32];
  for (int j = 0; j < kQK32; ++j) w[j] = x[j] * x[j];
  const float id = 1 / (am.max / static_cast<float>(kIq4Values[0]));
  const Iq4Fit f = iq4_fit(x, w, id);
  y->d = fp32_to_fp16(f.sumq2 > 0 ? f.sumqx / f.sumq2 : 0.f);
  iq4_pack(x, id, y->qs);
}

void quantize_block(const float* x, BlockIQ4_XS* y) {
  float scales[8];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = iq4_group_scale(x + 32 * ib);
    const float a = std::fabs(scales[ib]);
    if (a > amax_scale) {
      amax_scale = a;
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32;
  y->d = fp32_to_fp16(d);
  const float id = inverse_or_zero(d);
  y->scales_h = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const int l = clamp_int(nearest_int(id * scales[ib]), -32, 31);
    const float dl = d * static_cast<float>(l);
    iq4_pack(x + 32 * ib, inverse_or_zero(dl), y->qs + 16 * ib);
    const int ls = l + 32;
    if (ib % 2 == 0) {
      y->scales_l[ib / 2] = static_cast<uint8_t>(ls & 0xF);
    } else {
      y->scales_l[ib / 2] = static_cast<uint8_t>(y->scales_l[ib / 2] | ((ls & 0xF) << 4));
    }
    y->scales_h = static_cast<uint16_t>(y->scales_h | ((ls >> 4) << (2 * ib)));
  }
}

void quantize_block(const float* x, BlockMXFP4* y) {
  const float amax = abs_max(x, kQK32).amax;
  // Exponent so that amax / 2^(e - 127) lies in [4, 8): the largest FP4 magnitude is 6.
  int e = 0;
  if (amax > 0) e = clamp_int(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 254);
  y->e = static_cast<uint8_t>(e);
  const float d = std::bit_cast<float>(e8m0_half_bits(y->e));
  for (int j = 0; j < 16; ++j) {
    y->qs[j] = static_cast<uint8_t>(best_index_fp4(x[j], d) | (best_index_fp4(x[j + 16], d) << 4));
  }
}

}  // namespace mt::quant_internal
