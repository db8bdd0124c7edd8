// Reference quantizers of the K-quants (Q2_K .. Q6_K) and of Q8_K, following ggml's
// quantize_row_<type>_ref: a scale search per sub-block, the sub-block scales quantized
// against one super-block scale, then every element re-rounded with the scale it will
// actually be decoded with.
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quantize_util.h"

namespace mt::quant_internal {
namespace {

// A reciprocal scale, or 0 when it overflowed (a group far below the fp16 range).
float finite_or_zero(float v) { return std::isfinite(v) ? v : 0.f; }

// The 12 scale bytes plus d/dmin shared by Q4_K and Q5_K.
struct K4Scales {
  half_bits d = 0;
  half_bits dmin = 0;
  uint8_t scales[12] = {};
};

// Q4_K / Q5_K: per-32 affine search, 6-bit scales and mins, then final codes in
// L[0..255] (0..p.nmax) decoded with the stored scales.
K4Scales quantize_k4(const float* x, const AffineSearch& p, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = search_affine(xs, weights, 32, p, L + 32 * j, &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? finite_or_zero(63.f / max_scale) : 0.f;
  const float inv_min = max_min > 0 ? finite_or_zero(63.f / max_min) : 0.f;
  K4Scales out;
  for (int j = 0; j < 8; ++j) {
    const int ls = clamp_int(nearest_int(inv_scale * scales[j]), 0, 63);
    const int lm = clamp_int(nearest_int(inv_min * mins[j]), 0, 63);
    if (j < 4) {
      out.scales[j] = static_cast<uint8_t>(ls);
      out.scales[j + 4] = static_cast<uint8_t>(lm);
    } else {
      out.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      out.scales[j - 4] = static_cast<uint8_t>(out.scales[j - 4] | ((ls >> 4) << 6));
      out.scales[j] = static_cast<uint8_t>(out.scales[j] | ((lm >> 4) << 6));
    }
  }
  out.d = fp32_to_fp16(max_scale / 63.f);
  out.dmin = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, m = 0;
    unpack_scale_min_k4(j, out.scales, &sc, &m);
    const float d = fp16_to_fp32(out.d) * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = fp16_to_fp32(out.dmin) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + i] + dm) / d), 0, p.nmax));
    }
  }
  return out;
}

// Q2_K / Q3_K: 2 bits per element, 4 per byte; byte l of half h holds elements
// 128h + l + 32k at bits 2k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      qs[32 * h + l] =
          static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
    }
  }
}

}  // namespace

void quantize_block(const float* x, BlockQ2_K* y) {
  constexpr float kScaleMax = 15.f;
  uint8_t L[kQKK];
  float scales[16], mins[16], weights[16];
  float max_scale = 0, max_min = 0;
  const AffineSearch search{3, -0.5f, 0.1f, 15, true};
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = search_affine(x + 16 * j, weights, 16, search, L + 16 * j, &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float iscale = max_scale > 0 ? finite_or_zero(kScaleMax / max_scale) : 0.f;
  const float imin = max_min > 0 ? finite_or_zero(kScaleMax / max_min) : 0.f;
  for (int j = 0; j < 16; ++j) {
    const int ls = clamp_int(nearest_int(iscale * scales[j]), 0, 15);
    const int lm = clamp_int(nearest_int(imin * mins[j]), 0, 15);
    y->scales[j] = static_cast<uint8_t>(ls | (lm << 4));
  }
  y->d = fp32_to_fp16(max_scale > 0 ? max_scale / kScaleMax : 0.f);
  y->dmin = fp32_to_fp16(max_min > 0 ? max_min / kScaleMax : 0.f);
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y->d) * static_cast<float>(y->scales[j] & 0xF);
    if (d == 0) continue;
    const float dm = fp16_to_fp32(y->dmin) * static_cast<float>(y->scales[j] >> 4);
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
    }
  }
  pack_2bit(L, y->qs);
}

void quantize_block(const float* x, BlockQ3_K* y) {
  int8_t L[kQKK];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = search_symmetric_refine(x + 16 * j, 16, 4, L + 16 * j);
    const float a = std::fabs(scales[j]);
    if (a > amax) {
      amax = a;
      max_scale = scales[j];
    }
  }
  std::memset(y->scales, 0, sizeof(y->scales));
  const float iscale = max_scale != 0 ? finite_or_zero(-32.f / max_scale) : 0.f;
  if (iscale != 0) {
    for (int j = 0; j < 16; ++j) {
      const int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
      if (j < 8) {
        y->scales[j] = static_cast<uint8_t>(l & 0xF);
      } else {
        y->scales[j - 8] = static_cast<uint8_t>(y->scales[j - 8] | ((l & 0xF) << 4));
      }
      y->scales[8 + j % 4] = static_cast<uint8_t>(y->scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    y->d = fp32_to_fp16(1 / iscale);
  } else {
    y->d = fp32_to_fp16(0.f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y->d) * static_cast<float>(q3k_scale(j, y->scales));
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
  }
  // High bit of code j goes to bit j / 32 of hmask[j % 32]; the low two bits stay in L.
  std::memset(y->hmask, 0, sizeof(y->hmask));
  uint8_t low[kQKK];
  for (int j = 0; j < kQKK; ++j) {
    int code = L[j];
    if (code > 3) {
      y->hmask[j % 32] = static_cast<uint8_t>(y->hmask[j % 32] | (1u << (j / 32)));
      code -= 4;
    }
    low[j] = static_cast<uint8_t>(code);
  }
  pack_2bit(low, y->qs);
}

void quantize_block(const float* x, BlockQ4_K* y) {
  uint8_t L[kQKK];
  const K4Scales s = quantize_k4(x, AffineSearch{15, -1.f, 0.1f, 20, false}, L);
  y->d = s.d;
  y->dmin = s.dmin;
  std::memcpy(y->scales, s.scales, sizeof(y->scales));
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      y->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    }
  }
}

void quantize_block(const float* x, BlockQ5_K* y) {
  uint8_t L[kQKK];
  const K4Scales s = quantize_k4(x, AffineSearch{31, -0.5f, 0.1f, 15, false}, L);
  y->d = s.d;
  y->dmin = s.dmin;
  std::memcpy(y->scales, s.scales, sizeof(y->scales));
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + l + 32];
      y->qh[l] = static_cast<uint8_t>(y->qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      y->qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

void quantize_block(const float* x, BlockQ6_K* y) {
  int8_t L[kQKK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = search_symmetric(x + 16 * ib, 16, 32, L + 16 * ib);
    const float a = std::fabs(scales[ib]);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -128.f / max_scale;
  y->d = fp32_to_fp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    y->scales[ib] = static_cast<int8_t>(clamp_int(nearest_int(iscale * scales[ib]), -128, 127));
  }
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y->d) * static_cast<float>(y->scales[j]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* Lh = L + 128 * h;
    uint8_t* ql = y->ql + 64 * h;
    uint8_t* qh = y->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                   ((Lh[l + 96] >> 4) << 6));
    }
  }
}

void quantize_block(const float* x, BlockQ8_K* y) {
  const AbsMax am = abs_max(x, kQKK);
  const float iscale = am.amax != 0 ? finite_or_zero(-127.f / am.max) : 0.f;
  if (iscale == 0) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  for (int j = 0; j < kQKK; ++j) {
    y->qs[j] = static_cast<int8_t>(clamp_int(nearest_int(iscale * x[j]), -128, 127));
  }
  for (int g = 0; g < kQKK / 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += y->qs[16 * g + l];
    y->bsums[g] = static_cast<int16_t>(sum);
  }
  y->d = 1 / iscale;
}

}  // namespace mt::quant_internal
