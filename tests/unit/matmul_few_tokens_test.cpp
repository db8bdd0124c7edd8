// A batched decode step's products (2-8 tokens) take the tile kernel or the one-token dot
// per type (KernelTable::gemm_min_tokens); either way every token's row equals that token
// alone, bit for bit, so serving several sequences changes no sequence's numbers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "cpu/kernels.h"
#include "model/linear.h"
#include "quant/reference.h"

namespace mt {
namespace {

TEST(MatmulFewTokens, MinTokensAreSaneAndAvx2KQuantsStartAtFour) {
  for (int level = 0; level <= static_cast<int>(cpu::detect_hardware_isa()); ++level) {
    const cpu::KernelTable& k = cpu::kernels_for(static_cast<cpu::Isa>(level));
    for (uint8_t m : k.gemm_min_tokens) EXPECT_TRUE(m == 0 || (m >= 2 && m <= 8)) << cpu::isa_name(k.isa);
  }
  if (cpu::detect_hardware_isa() < cpu::Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  const cpu::KernelTable& avx2 = cpu::kernels_for(cpu::Isa::kAvx2);
  for (QuantType t : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::IQ4_XS}) {
    EXPECT_EQ(avx2.gemm_min_tokens[static_cast<int>(t)], 4) << type_name(t);
  }
  EXPECT_EQ(avx2.gemm_min_tokens[static_cast<int>(QuantType::Q8_0)], 0);
}

TEST(MatmulFewTokens, EveryWidthEqualsSingleTokensBitForBit) {
  const cpu::KernelTable& k = cpu::kernels();
  ThreadPool pool(2);
  std::mt19937 rng(29);
  std::normal_distribution<float> g(0.f, 0.05f);
  const int64_t n_in = 512, n_out = 40;  // 40 rows: row tiles with a partial last group
  int checked = 0;
  for (QuantType type : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::IQ4_XS, QuantType::Q8_0,
                         QuantType::Q4_0}) {
    if (k.vec_dot[static_cast<int>(type)] == nullptr) continue;
    Tensor w;
    w.type = type;
    w.ne = {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), 1, 1};
    w.row_bytes = *row_bytes(type, static_cast<uint64_t>(n_in));
    w.matrix_bytes = w.row_bytes * static_cast<uint64_t>(n_out);
    std::vector<uint8_t> bytes(w.matrix_bytes);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
      for (float& x : row) x = g(rng);
      quantize_row(type, row.data(), bytes.data() + r * w.row_bytes, n_in);
    }
    w.data = bytes.data();
    for (int64_t T = 2; T <= 8; ++T) {
      std::vector<float> x(static_cast<size_t>(T * n_in));
      for (float& v : x) v = g(rng) * 20.f;
      std::vector<float> y(static_cast<size_t>(T * n_out)), one(static_cast<size_t>(n_out));
      matmul(w, 0, x.data(), T, y.data(), pool);
      for (int64_t t = 0; t < T; ++t) {
        matmul(w, 0, &x[static_cast<size_t>(t * n_in)], 1, one.data(), pool);
        ASSERT_EQ(std::memcmp(one.data(), &y[static_cast<size_t>(t * n_out)], one.size() * sizeof(float)), 0)
            << type_name(type) << " T=" << T << " token " << t;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace mt
