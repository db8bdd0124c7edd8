// cpu/ prefill tile dots (KernelTable::gemm): every ISA level up to the hardware's, every
// type with a gemm entry, over shapes x row counts x token counts x strides, against that
// level's own vec_dot pair by pair, with |diff| <= 1e-5 * sum|w_i * a_i| + 1e-6 over the
// dequantized rows; y entries outside the tile stay untouched. Also axpy_f16 of every
// level against the scalar table's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "quant/types.h"
#include "test_util.h"

namespace mt::cpu {
namespace {

constexpr int64_t kShapes[] = {256, 2048, 8192};
// 32-element types also: block counts that are not a multiple of 4 (1, 3, 45)
constexpr int64_t kShapes32[] = {32, 96, 1440};
constexpr int64_t kRowCounts[] = {1, 3, 4, 7, 16, 33};
constexpr int64_t kTokenCounts[] = {1, 2, 3, 4, 5, 8, 17};
constexpr float kSentinel = -12345.f;

using test::bytes_of;

// Gaussian floats with a magnitude per 256 elements (some runs zero, some large).
std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 4);
  static const float kMagnitudes[] = {0.f, 1e-3f, 0.02f, 1.f, 40.f};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += kQKK) {
    const float mag = kMagnitudes[pick(rng)];
    for (int64_t j = b; j < std::min<int64_t>(n, b + kQKK); ++j) x[static_cast<size_t>(j)] = mag * gauss(rng);
  }
  return x;
}

// `count` quantized rows of n elements, each `stride` bytes apart (the gap filled with
// junk), plus each row dequantized.
struct Rows {
  std::vector<uint8_t> bytes;
  std::vector<std::vector<float>> values;
  size_t stride;
};

Rows make_rows(QuantType type, int64_t n, int64_t count, size_t extra, std::mt19937& rng) {
  Rows rows;
  const size_t row = bytes_of(type, n);
  rows.stride = row + extra;
  rows.bytes.assign(rows.stride * static_cast<size_t>(count), 0xA5);
  std::vector<uint8_t> staged(row);
  for (int64_t r = 0; r < count; ++r) {
    quantize_row(type, random_floats(n, rng).data(), staged.data(), n);
    std::memcpy(rows.bytes.data() + static_cast<size_t>(r) * rows.stride, staged.data(), row);
    std::vector<float> v(static_cast<size_t>(n));
    dequantize_row(type, staged.data(), v.data(), n);
    rows.values.push_back(std::move(v));
  }
  return rows;
}

std::vector<QuantType> gemm_types(const KernelTable& t) {
  std::vector<QuantType> types;
  for (int id = 0; id < 64; ++id) {
    if (t.gemm[id] != nullptr) types.push_back(static_cast<QuantType>(id));
  }
  return types;
}

// One (type, n) problem with the largest row and token counts; smaller cases use a prefix.
void check_type(const KernelTable& k, QuantType type, int64_t n, uint32_t seed) {
  const QuantType act_type = activation_type(type);
  const VecDotFn dot = k.vec_dot[static_cast<int>(type)];
  const GemmFn gemm = k.gemm[static_cast<int>(type)];
  ASSERT_NE(dot, nullptr);
  const int64_t max_rows = 33, max_tok = 17;
  for (size_t extra : {size_t{0}, size_t{72}}) {
    std::mt19937 rng(seed + static_cast<uint32_t>(extra));
    const Rows w = make_rows(type, n, max_rows, extra, rng);
    const Rows a = make_rows(act_type, n, max_tok, extra, rng);
    // want[t][r] and the tolerance of each pair
    std::vector<float> want(static_cast<size_t>(max_tok * max_rows));
    std::vector<double> tol(want.size());
    for (int64_t t = 0; t < max_tok; ++t) {
      for (int64_t r = 0; r < max_rows; ++r) {
        const size_t i = static_cast<size_t>(t * max_rows + r);
        want[i] = dot(n, w.bytes.data() + static_cast<size_t>(r) * w.stride,
                      a.bytes.data() + static_cast<size_t>(t) * a.stride);
        double abs_sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          abs_sum += std::fabs(static_cast<double>(w.values[static_cast<size_t>(r)][static_cast<size_t>(j)]) *
                               a.values[static_cast<size_t>(t)][static_cast<size_t>(j)]);
        }
        tol[i] = 1e-5 * abs_sum + 1e-6;
      }
    }
    for (int64_t rows : kRowCounts) {
      for (int64_t toks : kTokenCounts) {
        const int64_t y_stride = rows + 3;
        std::vector<float> y(static_cast<size_t>((toks + 1) * y_stride), kSentinel);
        gemm(n, w.bytes.data(), w.stride, rows, a.bytes.data(), a.stride, toks, y.data(), y_stride);
        const std::string where = std::string(isa_name(k.isa)) + " " + type_name(type) + " n=" + std::to_string(n) +
                                  " rows=" + std::to_string(rows) + " tok=" + std::to_string(toks) +
                                  " extra=" + std::to_string(extra);
        int failures = 0;
        for (int64_t t = 0; t <= toks && failures < 5; ++t) {
          for (int64_t r = 0; r < y_stride && failures < 5; ++r) {
            const float got = y[static_cast<size_t>(t * y_stride + r)];
            if (t < toks && r < rows) {
              const size_t i = static_cast<size_t>(t * max_rows + r);
              const bool ok = std::fabs(static_cast<double>(got) - want[i]) <= tol[i];
              EXPECT_TRUE(ok) << where << " t=" << t << " r=" << r << ": " << got << " vs " << want[i];
              failures += ok ? 0 : 1;
            } else {
              EXPECT_EQ(got, kSentinel) << where << " wrote outside the tile at t=" << t << " r=" << r;
              failures += got == kSentinel ? 0 : 1;
            }
          }
        }
      }
    }
  }
}

TEST(CpuGemm, SimdLevelsHaveTheMainTypes) {
  for (int level = 1; level <= static_cast<int>(detect_hardware_isa()); ++level) {
    const KernelTable& t = kernels_for(static_cast<Isa>(level));
    for (QuantType type : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_0, QuantType::Q4_0,
                           QuantType::Q5_0, QuantType::IQ4_NL, QuantType::IQ4_XS}) {
      EXPECT_NE(t.gemm[static_cast<int>(type)], nullptr) << isa_name(t.isa) << " " << type_name(type);
    }
  }
}

TEST(CpuGemm, EveryLevelMatchesItsVecDot) {
  uint32_t seed = 1;
  for (int level = 0; level <= static_cast<int>(detect_hardware_isa()); ++level) {
    const KernelTable& k = kernels_for(static_cast<Isa>(level));
    for (QuantType type : gemm_types(k)) {
      for (int64_t n : kShapes) check_type(k, type, n, seed++);
      if (type_traits(type).block_elems == kQK32) {
        for (int64_t n : kShapes32) check_type(k, type, n, seed++);
      }
    }
  }
}

// The fallback the null entries mean, on the scalar table's Q4_K dot.
TEST(CpuGemm, ByVecDotFillsTheTile) {
  const KernelTable& k = kernels_for(Isa::kScalar);
  const VecDotFn dot = k.vec_dot[static_cast<int>(QuantType::Q4_K)];
  std::mt19937 rng(7);
  const int64_t n = 512, rows = 3, toks = 2, y_stride = 5;
  const Rows w = make_rows(QuantType::Q4_K, n, rows, 8, rng);
  const Rows a = make_rows(QuantType::Q8_K, n, toks, 0, rng);
  std::vector<float> y(static_cast<size_t>(toks * y_stride), kSentinel);
  gemm_by_vec_dot(dot, n, w.bytes.data(), w.stride, rows, a.bytes.data(), a.stride, toks, y.data(), y_stride);
  for (int64_t t = 0; t < toks; ++t) {
    for (int64_t r = 0; r < y_stride; ++r) {
      const float want = r < rows ? dot(n, w.bytes.data() + static_cast<size_t>(r) * w.stride,
                                         a.bytes.data() + static_cast<size_t>(t) * a.stride)
                                   : kSentinel;
      EXPECT_EQ(y[static_cast<size_t>(t * y_stride + r)], want) << "t=" << t << " r=" << r;
    }
  }
}

TEST(CpuGemm, AxpyF16MatchesScalar) {
  const KernelTable& scalar = kernels_for(Isa::kScalar);
  ASSERT_NE(scalar.axpy_f16, nullptr);
  std::mt19937 rng(3);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int level = 1; level <= static_cast<int>(detect_hardware_isa()); ++level) {
    const KernelTable& k = kernels_for(static_cast<Isa>(level));
    ASSERT_NE(k.axpy_f16, nullptr) << isa_name(k.isa);
    for (int64_t n : {1, 7, 8, 15, 16, 33, 64, 100, 1000}) {
      std::vector<half_bits> x(static_cast<size_t>(n) + 1);  // + 1: start x at an odd address
      for (auto& h : x) h = fp32_to_fp16(gauss(rng));
      std::vector<float> y0(static_cast<size_t>(n));
      for (auto& v : y0) v = gauss(rng);
      const float a = gauss(rng);
      std::vector<uint8_t> xb(2 * x.size() + 1);
      std::memcpy(xb.data() + 1, x.data(), 2 * x.size());
      std::vector<float> want = y0, got = y0;
      scalar.axpy_f16(n, a, xb.data() + 1, want.data());
      k.axpy_f16(n, a, xb.data() + 1, got.data());
      for (size_t i = 0; i < got.size(); ++i) {
        const double scale = std::fabs(static_cast<double>(y0[i])) + std::fabs(static_cast<double>(want[i] - y0[i]));
        EXPECT_NEAR(got[i], want[i], 1e-6 * scale + 1e-30) << isa_name(k.isa) << " n=" << n << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace mt::cpu
