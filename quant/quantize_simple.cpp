// Reference quantizers of the 32-element integer formats (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q8_1): one scale (and for _1 one min) from the block's extremes, then plain
// rounding, exactly as ggml's quantize_row_<type>_ref.
#include <cmath>
#include <limits>

#include "quant/fp16.h"
#include "quant/quantize_util.h"

namespace mt::quant_internal {
namespace {

// Smallest and largest element of a block.
struct MinMax {
  float min = std::numeric_limits<float>::max();
  float max = -std::numeric_limits<float>::max();
};
MinMax min_max(const float* x, int n) {
  MinMax r;
  for (int j = 0; j < n; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

}  // namespace

void quantize_block(const float* x, BlockQ4_0* y) {
  const AbsMax am = abs_max(x, kQK32);
  const float d = am.max / -8;  // the extreme value maps to code 0 (-8)
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  for (int j = 0; j < 16; ++j) {
    const int lo = trunc_clamped(x[j] * id + 8.5f, 15);
    const int hi = trunc_clamped(x[j + 16] * id + 8.5f, 15);
    y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quantize_block(const float* x, BlockQ4_1* y) {
  const MinMax mm = min_max(x, kQK32);
  const float d = (mm.max - mm.min) / 15;
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  y->m = fp32_to_fp16(mm.min);
  for (int j = 0; j < 16; ++j) {
    const int lo = trunc_clamped((x[j] - mm.min) * id + 0.5f, 15);
    const int hi = trunc_clamped((x[j + 16] - mm.min) * id + 0.5f, 15);
    y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quantize_block(const float* x, BlockQ5_0* y) {
  const AbsMax am = abs_max(x, kQK32);
  const float d = am.max / -16;
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = trunc_clamped(x[j] * id + 16.5f, 31);
    const int hi = trunc_clamped(x[j + 16] * id + 16.5f, 31);
    y->qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  store_qh(qh, y->qh);
}

void quantize_block(const float* x, BlockQ5_1* y) {
  const MinMax mm = min_max(x, kQK32);
  const float d = (mm.max - mm.min) / 31;
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  y->m = fp32_to_fp16(mm.min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = trunc_clamped((x[j] - mm.min) * id + 0.5f, 31);
    const int hi = trunc_clamped((x[j + 16] - mm.min) * id + 0.5f, 31);
    y->qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  store_qh(qh, y->qh);
}

void quantize_block(const float* x, BlockQ8_0* y) {
  const float d = abs_max(x, kQK32).amax / 127;
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK32; ++j) y->qs[j] = static_cast<int8_t>(round_clamped(x[j] * id, 127));
}

void quantize_block(const float* x, BlockQ8_1* y) {
  const float d = abs_max(x, kQK32).amax / 127;
  const float id = inverse_or_zero(d);
  y->d = fp32_to_fp16(d);
  int sum = 0;
  for (int j = 0; j < kQK32; ++j) {
    y->qs[j] = static_cast<int8_t>(round_clamped(x[j] * id, 127));
    sum += y->qs[j];
  }
  y->s = fp32_to_fp16(static_cast<float>(sum) * d);
}

}  // namespace mt::quant_internal
