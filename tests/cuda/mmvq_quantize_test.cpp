// cuda/kernels/mmvq.h's activation quantizer on the device against quant/'s reference:
// quantize_act, each ActQuant, equals the reference quantize_row of Q8_0, Q8_1 and Q8_K
// byte for byte (quants, d, the int sums of each 16), over random rows and edge cases
// (zero, huge, infinite, NaN, subnormal blocks, ties of magnitude, rounding midpoints),
// from aligned and misaligned X (the NaNs with payloads expect the host FPU's NaN
// propagation, as x86 and ARM do it); and act_quant_for pairs every quantized weight type
// with the CPU's activation type. (The products: mmvq_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cuda/kernels/mmvq.h"
#include "cuda_test_util.h"
#include "mmvq_test_util.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using namespace test;  // cuda_test_util.h, mmvq_test_util.h

float bits(uint32_t u) { return std::bit_cast<float>(u); }

// Rows of n (a multiple of 256): row 0 holds one edge case per 256-block (the rest of
// its blocks random), the other rows random at a magnitude drawn per 256-block.
std::vector<float> quantizer_rows(int rows, int n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<float> u(-0.99f, 0.99f);
  std::uniform_int_distribution<int> pick(0, 4);
  static const float kMagnitudes[] = {0.f, 1e-3f, 1.f, 40.f, 3e4f};
  std::vector<float> x(static_cast<size_t>(rows) * n);
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < n / 256; ++b) {
      const float mag = r == 0 ? 1.f : kMagnitudes[pick(rng)];
      for (int j = 0; j < 256; ++j) x[static_cast<size_t>(r) * n + 256 * b + j] = mag * g(rng);
    }
  }
  auto block = [&](int b) { return &x[static_cast<size_t>(256) * b]; };
  float* p = block(0);  // all zero, some of them -0
  for (int j = 0; j < 256; ++j) p[j] = j % 3 == 0 ? -0.f : 0.f;
  block(1)[77] = 3e38f;  // one huge value
  p = block(2);          // a negative maximum
  for (int j = 0; j < 256; ++j) p[j] = u(rng);
  p[130] = -50.f;
  p = block(3);  // equal magnitudes: the first (negative) one wins
  for (int j = 0; j < 256; ++j) p[j] = 6.f * u(rng);
  p[5] = -7.f, p[20] = 7.f;
  p = block(4);  // the same with the positive one first
  for (int j = 0; j < 256; ++j) p[j] = 6.f * u(rng);
  p[5] = 7.f, p[200] = -7.f;
  p = block(5);  // rounding midpoints: every |max| 127, so Q8_0's d = 1 and Q8_K's iscale = 1
  for (int k = 0; k < 8; ++k) {
    p[32 * k] = k % 2 == 0 ? -127.f : 127.f;
    for (int i = 1; i < 32; ++i) p[32 * k + i] = static_cast<float>(i - 16) + 0.5f;
  }
  p = block(6);  // NaNs: quiet, negative, with payloads (never the maximum)
  p[0] = std::numeric_limits<float>::quiet_NaN();
  p[3] = bits(0xFFC00000u);
  p[40] = bits(0x7FC00005u);
  p[41] = bits(0xFFC0002Au);
  p = block(7);  // infinities: Q8_K gives a zero block, Q8_0 an infinite d with zero quants
  p[9] = std::numeric_limits<float>::infinity();
  p[100] = -std::numeric_limits<float>::infinity();
  p = block(8);  // only subnormals: 127 / max overflows, the block quantizes to zero
  for (int j = 0; j < 256; ++j) p[j] = 1e-40f * (0.5f + 0.5f * std::fabs(u(rng))) * (j % 2 == 0 ? 1.f : -1.f);
  p = block(9);  // a tiny maximum: Q8_K's d is an f32 subnormal; some subnormal inputs
  for (int j = 0; j < 256; ++j) p[j] = 1e-37f * u(rng);
  p[0] = 1e-36f;
  p[10] = 3e-40f, p[11] = -2e-39f;
  p = block(10);  // every magnitude equal, alternating sign: the first (+3) wins
  for (int j = 0; j < 256; ++j) p[j] = j % 2 == 0 ? 3.f : -3.f;
  p = block(11);  // the maximum at the last element
  for (int j = 0; j < 256; ++j) p[j] = u(rng);
  p[255] = -9.f;
  p = block(12);  // one value everywhere: every quant -127, sums -2032 per 16
  for (int j = 0; j < 256; ++j) p[j] = 0.37f;
  p = block(13);  // d beyond half range (Q8_0: d = inf), finite for Q8_K
  for (int j = 0; j < 256; ++j) p[j] = 1e7f * u(rng);
  p[17] = 2e7f;
  return x;
}

struct QuantizedRows {
  std::vector<int8_t> qs;  // (rows, n)
  std::vector<uint2> meta; // (rows, n / 32)
};
// quantize_act on the device with X `offset` floats into its allocation.
QuantizedRows device_quantize(const std::vector<float>& x, int rows, int n, ActQuant mode, size_t offset) {
  DeviceBuffer dx((x.size() + offset) * sizeof(float));
  MT_CUDA_CHECK(cudaMemcpy(dx.as<float>() + offset, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  DeviceBuffer qs(static_cast<size_t>(rows) * n), meta(static_cast<size_t>(rows) * n / 32 * sizeof(uint2));
  quantize_act(dx.as<float>() + offset, rows, n, mode, qs.as<int8_t>(), meta.as<uint2>(), nullptr);
  MT_CUDA_CHECK(cudaGetLastError());
  return {to_host<int8_t>(qs, static_cast<size_t>(rows) * n), to_host<uint2>(meta, static_cast<size_t>(rows) * n / 32)};
}

int sum_of(const int8_t* q, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += q[i];
  return s;
}

TEST(Mmvq, ActivationQuantizersEqualTheReferenceBlocks) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  const int rows = 4, n = 4352;  // 17 blocks of 256
  const std::vector<float> x = quantizer_rows(rows, n, rng);
  for (size_t offset : {size_t{0}, size_t{1}}) {  // 1: X not 16-byte aligned (the scalar loads)
    for (ActQuant mode : {ActQuant::kQ8_0, ActQuant::kQ8_1, ActQuant::kQ8_K}) {
      const QuantizedRows got = device_quantize(x, rows, n, mode, offset);
      for (int r = 0; r < rows; ++r) {
        const float* xr = &x[static_cast<size_t>(r) * n];
        const int8_t* qr = &got.qs[static_cast<size_t>(r) * n];
        const uint2* mr = &got.meta[static_cast<size_t>(r) * (n / 32)];
        if (mode == ActQuant::kQ8_K) {
          std::vector<BlockQ8_K> ref(n / 256);
          quantize_row(QuantType::Q8_K, xr, ref.data(), n);
          for (int b = 0; b < n / 256; ++b) {
            SCOPED_TRACE(testing::Message() << "Q8_K offset " << offset << " row " << r << " block " << b);
            ASSERT_EQ(0, std::memcmp(qr + 256 * b, ref[b].qs, 256));
            for (int k = 0; k < 8; ++k) {
              const uint2 m = mr[8 * b + k];
              ASSERT_EQ(m.x, std::bit_cast<uint32_t>(ref[b].d)) << "entry " << k;
              ASSERT_EQ(static_cast<int16_t>(m.y & 0xFFFFu), ref[b].bsums[2 * k]) << "entry " << k;
              ASSERT_EQ(static_cast<int16_t>(m.y >> 16), ref[b].bsums[2 * k + 1]) << "entry " << k;
            }
          }
          continue;
        }
        // kQ8_0 and kQ8_1: the quants and d of BlockQ8_0 / BlockQ8_1 (which agree).
        std::vector<BlockQ8_0> ref0(n / 32);
        std::vector<BlockQ8_1> ref1(n / 32);
        quantize_row(QuantType::Q8_0, xr, ref0.data(), n);
        quantize_row(QuantType::Q8_1, xr, ref1.data(), n);
        for (int b = 0; b < n / 32; ++b) {
          SCOPED_TRACE(testing::Message() << (mode == ActQuant::kQ8_0 ? "Q8_0" : "Q8_1") << " offset " << offset
                                          << " row " << r << " block " << b);
          const half_bits d = mode == ActQuant::kQ8_0 ? ref0[b].d : ref1[b].d;
          const int8_t* ref_qs = mode == ActQuant::kQ8_0 ? ref0[b].qs : ref1[b].qs;
          ASSERT_EQ(0, std::memcmp(qr + 32 * b, ref_qs, 32));
          ASSERT_EQ(mr[b].x, std::bit_cast<uint32_t>(fp16_to_fp32(d)));
          ASSERT_EQ(static_cast<int16_t>(mr[b].y & 0xFFFFu), sum_of(ref_qs, 16));
          ASSERT_EQ(static_cast<int16_t>(mr[b].y >> 16), sum_of(ref_qs + 16, 16));
        }
      }
    }
  }
}

TEST(Mmvq, ActQuantPairsEveryQuantizedTypeAsTheCpu) {
  for (QuantType t : kTypes) {
    if (is_float(t)) continue;
    const QuantType want = cpu::activation_type(t);
    const ActQuant got = act_quant_for(t);
    const QuantType as_type = got == ActQuant::kQ8_0   ? QuantType::Q8_0
                              : got == ActQuant::kQ8_1 ? QuantType::Q8_1
                                                       : QuantType::Q8_K;
    EXPECT_EQ(want, as_type) << type_name(t);
  }
}

}  // namespace
}  // namespace mt::cuda
