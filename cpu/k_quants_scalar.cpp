// K-quant dots, scalar: the definition every SIMD version computes (cpu/kernels.h).
//
// Per super-block of 256 elements: sumi = sum over sub-blocks j of scale_j * sum(code *
// q8) in int32 (codes signed where the format is: Q3_K -4..3, Q6_K -32..31, IQ4_XS its
// codebook), then d_w * d_a * sumi in float; Q2_K, Q4_K and Q5_K subtract dmin * d_a *
// sum(min_j * bsum_j), the activation's per-16 sums standing in for sum(q8). Blocks are
// summed in float in block order. No int32 overflow: |sumi| <= 2^27 for every type.
//
// Each block is first decoded to its 256 codes in element order (the layouts exactly as
// quant/dequantize.cpp reads them), then dotted sub-block by sub-block.
#include <cstdint>

#include "core/check.h"
#include "cpu/register.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace mt::cpu {
namespace {

using Codes = int8_t[kQKK];

void decode(const BlockQ2_K& b, Codes q) {
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        q[128 * half + 32 * k + l] = static_cast<int8_t>((b.qs[32 * half + l] >> (2 * k)) & 3);
      }
    }
  }
}

void decode(const BlockQ3_K& b, Codes q) {
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 4; ++k) {
      const int bit = 4 * half + k;
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * half + l] >> (2 * k)) & 3;
        q[128 * half + 32 * k + l] = static_cast<int8_t>(low - (((b.hmask[l] >> bit) & 1) != 0 ? 0 : 4));
      }
    }
  }
}

// Q4_K and Q5_K (kFifthBit): 64 elements per 32 bytes, low nibbles first.
template <bool kFifthBit, typename Block>
void decode_q45(const Block& b, Codes q) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      int lo = b.qs[32 * c + l] & 0xF, hi = b.qs[32 * c + l] >> 4;
      if constexpr (kFifthBit) {
        lo |= ((b.qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      q[64 * c + l] = static_cast<int8_t>(lo);
      q[64 * c + 32 + l] = static_cast<int8_t>(hi);
    }
  }
}

void decode(const BlockQ6_K& b, Codes q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    for (int l = 0; l < 32; ++l) {
      int8_t* y = q + 128 * half + l;
      y[0] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      y[32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      y[64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      y[96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

void decode(const BlockIQ4_XS& b, Codes q) {
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 16; ++l) {
      q[32 * j + l] = kIq4Values[b.qs[16 * j + l] & 0xF];
      q[32 * j + 16 + l] = kIq4Values[b.qs[16 * j + l] >> 4];
    }
  }
}

template <int kLen>
int32_t dot(const int8_t* q, const int8_t* y) {
  int32_t sum = 0;
  for (int l = 0; l < kLen; ++l) sum += q[l] * y[l];
  return sum;
}

// Block i's contribution: d_w * d_a * sumi (- dmin * d_a * summ).
float block_sum(float da, half_bits d, int32_t sumi) { return da * fp16_to_fp32(d) * static_cast<float>(sumi); }
float block_sum(float da, half_bits d, half_bits dmin, int32_t sumi, int32_t summ) {
  return da * fp16_to_fp32(d) * static_cast<float>(sumi) - da * fp16_to_fp32(dmin) * static_cast<float>(summ);
}

float dot_q2_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Codes q;
    decode(w[i], q);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (w[i].scales[j] & 0xF) * dot<16>(q + 16 * j, a[i].qs + 16 * j);
      summ += (w[i].scales[j] >> 4) * a[i].bsums[j];
    }
    sum += block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
  }
  return sum;
}

float dot_q3_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Codes q;
    decode(w[i], q);
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += q3k_scale(j, w[i].scales) * dot<16>(q + 16 * j, a[i].qs + 16 * j);
    sum += block_sum(a[i].d, w[i].d, sumi);
  }
  return sum;
}

template <typename Block, bool kFifthBit>
float dot_q45_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const Block*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Codes q;
    decode_q45<kFifthBit>(w[i], q);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t scale = 0, min = 0;
      unpack_scale_min_k4(j, w[i].scales, &scale, &min);
      sumi += scale * dot<32>(q + 32 * j, a[i].qs + 32 * j);
      summ += min * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
    }
    sum += block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
  }
  return sum;
}

float dot_q6_k(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Codes q;
    decode(w[i], q);
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += w[i].scales[j] * dot<16>(q + 16 * j, a[i].qs + 16 * j);
    sum += block_sum(a[i].d, w[i].d, sumi);
  }
  return sum;
}

float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  MT_CHECK(n % kQKK == 0);
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const BlockIQ4_XS& b = w[i];
    Codes q;
    decode(b, q);
    int32_t sumi = 0;
    for (int j = 0; j < 8; ++j) {
      const int ls = ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
      sumi += (ls - 32) * dot<32>(q + 32 * j, a[i].qs + 32 * j);
    }
    sum += block_sum(a[i].d, b.d, sumi);
  }
  return sum;
}

}  // namespace

void register_k_quants_scalar(KernelTable& t) {
  t.vec_dot[static_cast<int>(QuantType::Q2_K)] = dot_q2_k;
  t.vec_dot[static_cast<int>(QuantType::Q3_K)] = dot_q3_k;
  t.vec_dot[static_cast<int>(QuantType::Q4_K)] = dot_q45_k<BlockQ4_K, false>;
  t.vec_dot[static_cast<int>(QuantType::Q5_K)] = dot_q45_k<BlockQ5_K, true>;
  t.vec_dot[static_cast<int>(QuantType::Q6_K)] = dot_q6_k;
  t.vec_dot[static_cast<int>(QuantType::IQ4_XS)] = dot_iq4_xs;
}

}  // namespace mt::cpu
