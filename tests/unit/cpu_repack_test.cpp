// cpu/repack.h: the interleaved Q4_K and Q6_K layouts round-trip through the reference, and each
// ISA's gemm_x8 kernel agrees with the scalar vec_dot on the original rows over shapes x
// token counts (|diff| <= 1e-5 * sum|w_i a_i| + 1e-6), with batch and single-token
// results bit-identical and the y padding untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/reference.h"

namespace mt::cpu {
namespace {

struct RepackCase {
  QuantType type;
  int64_t n, rows, tokens;
};

class RepackTest : public ::testing::TestWithParam<RepackCase> {};

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

TEST_P(RepackTest, MatchesScalarDot) {
  const RepackCase c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.n * 131 + c.rows * 7 + c.tokens));
  const QuantType type = c.type;
  const size_t wrow = *row_bytes(type, static_cast<uint64_t>(c.n));
  const size_t arow = *row_bytes(QuantType::Q8_K, static_cast<uint64_t>(c.n));
  std::vector<uint8_t> w(wrow * static_cast<size_t>(c.rows)), packed(w.size()), act(arow * static_cast<size_t>(c.tokens));
  std::vector<float> wf = random_floats(static_cast<size_t>(c.n * c.rows), rng, 0.05f);
  std::vector<float> af = random_floats(static_cast<size_t>(c.n * c.tokens), rng, 1.0f);
  for (int64_t r = 0; r < c.rows; ++r) quantize_row(type, &wf[r * c.n], &w[r * wrow], c.n);
  for (int64_t t = 0; t < c.tokens; ++t) quantize_row(QuantType::Q8_K, &af[t * c.n], &act[t * arow], c.n);
  interleave_rows(type, w.data(), wrow, c.n, c.rows, packed.data());

  // Expected: scalar vec_dot on the original rows; bound from the dequantized rows.
  const KernelTable& scalar = kernels_for(Isa::kScalar);
  const int64_t ys = c.rows + 3;
  std::vector<float> expect(static_cast<size_t>(c.tokens * ys)), bound(expect.size());
  std::vector<float> wd(static_cast<size_t>(c.n)), ad(static_cast<size_t>(c.n));
  for (int64_t r = 0; r < c.rows; ++r) {
    dequantize_row(type, &w[r * wrow], wd.data(), c.n);
    for (int64_t t = 0; t < c.tokens; ++t) {
      dequantize_row(QuantType::Q8_K, &act[t * arow], ad.data(), c.n);
      double mag = 0;
      for (int64_t i = 0; i < c.n; ++i) mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
      expect[t * ys + r] = scalar.vec_dot[static_cast<int>(type)](c.n, &w[r * wrow], &act[t * arow]);
      bound[t * ys + r] = static_cast<float>(1e-5 * mag + 1e-6);
    }
  }
  std::vector<float> ref(expect.size(), -7.f);
  gemm_x8_reference(type, c.n, packed.data(), kInterleave * wrow, c.rows, act.data(), arow, c.tokens, ref.data(), ys);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) EXPECT_EQ(ref[t * ys + r], expect[t * ys + r]) << "reference t=" << t << " r=" << r;
  }

  for (int level = 0; level <= static_cast<int>(detect_hardware_isa()); ++level) {
    const KernelTable& k = kernels_for(static_cast<Isa>(level));
    const GemmFn fn = k.gemm_x8[static_cast<int>(type)];
    if (fn == nullptr) continue;
    std::vector<float> y(expect.size(), -7.f);
    fn(c.n, packed.data(), kInterleave * wrow, c.rows, act.data(), arow, c.tokens, y.data(), ys);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < ys; ++r) {
        const size_t i = static_cast<size_t>(t * ys + r);
        if (r >= c.rows) {
          EXPECT_EQ(y[i], -7.f) << "padding written at t=" << t << " r=" << r;
          continue;
        }
        EXPECT_NEAR(y[i], expect[i], bound[i]) << isa_name(k.isa) << " t=" << t << " r=" << r;
      }
      // One token alone gives the same bits as inside the batch.
      std::vector<float> one(static_cast<size_t>(c.rows));
      fn(c.n, packed.data(), kInterleave * wrow, c.rows, &act[t * arow], arow, 1, one.data(), c.rows);
      for (int64_t r = 0; r < c.rows; ++r) EXPECT_EQ(one[r], y[t * ys + r]) << isa_name(k.isa) << " single t=" << t << " r=" << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RepackTest,
                         ::testing::Values(RepackCase{QuantType::Q4_K, 256, 8, 1}, RepackCase{QuantType::Q4_K, 256, 8, 5},
                                           RepackCase{QuantType::Q4_K, 2048, 16, 1}, RepackCase{QuantType::Q4_K, 2048, 16, 4},
                                           RepackCase{QuantType::Q4_K, 2048, 24, 7}, RepackCase{QuantType::Q4_K, 4096, 8, 3},
                                           RepackCase{QuantType::Q4_K, 1024, 32, 9}, RepackCase{QuantType::Q6_K, 256, 8, 1},
                                           RepackCase{QuantType::Q6_K, 256, 8, 5}, RepackCase{QuantType::Q6_K, 2048, 16, 1},
                                           RepackCase{QuantType::Q6_K, 2048, 24, 7}, RepackCase{QuantType::Q6_K, 1024, 32, 9}));

TEST(Repack, LayoutsExistForQ4KAndQ6K) {
  EXPECT_TRUE(has_interleaved_layout(QuantType::Q4_K));
  EXPECT_TRUE(has_interleaved_layout(QuantType::Q6_K));
  EXPECT_FALSE(has_interleaved_layout(QuantType::Q5_K));
  EXPECT_FALSE(has_interleaved_layout(QuantType::Q8_0));
}

}  // namespace
}  // namespace mt::cpu
