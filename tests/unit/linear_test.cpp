// model/linear.h: matmul_jobs over several matrices at once (expert slices, token ranges,
// mixed types, interleaved Q4_K) equals matmul_reference per job; an interleaved matrix
// gives the same numbers as its GGUF layout up to summation order, and bit-identical
// numbers for one token alone and inside a batch; the tile kernels agree with the one-token
// dots (bit-identical on AVX2).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "model/linear.h"
#include "quant/reference.h"

namespace mt {
namespace {

struct Matrix {
  Tensor t;
  std::vector<uint8_t> bytes;
};

// n_out x n_in x n_mat random weights quantized to `type`.
Matrix make_matrix(QuantType type, uint64_t n_in, uint64_t n_out, uint64_t n_mat, std::mt19937& rng) {
  Matrix m;
  m.t.type = type;
  m.t.ne = {n_in, n_out, n_mat, 1};
  m.t.row_bytes = *row_bytes(type, n_in);
  m.t.matrix_bytes = m.t.row_bytes * n_out;
  m.bytes.resize(m.t.matrix_bytes * n_mat);
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> row(n_in);
  for (uint64_t r = 0; r < n_out * n_mat; ++r) {
    for (float& x : row) x = g(rng);
    quantize_row(type, row.data(), m.bytes.data() + r * m.t.row_bytes, static_cast<int64_t>(n_in));
  }
  m.t.data = m.bytes.data();
  return m;
}

Matrix interleaved_copy(const Matrix& src) {
  Matrix m = src;
  for (uint64_t e = 0; e < src.t.ne[2]; ++e) {
    cpu::interleave_rows(src.t.type, src.bytes.data() + e * src.t.matrix_bytes, src.t.row_bytes,
                         static_cast<int64_t>(src.t.ne[0]), static_cast<int64_t>(src.t.ne[1]),
                         m.bytes.data() + e * src.t.matrix_bytes);
  }
  m.t.data = m.bytes.data();
  m.t.interleaved = true;
  return m;
}

std::vector<float> random_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (float& x : v) x = g(rng);
  return v;
}

// max |a - b| / max |b| over n values.
double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(b[i])));
  }
  return d / std::max(m, 1e-30);
}

TEST(MatmulJobs, ManyJobsEqualTheReferencePerJob) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  const int64_t n_in = 512, T = 13;
  Matrix experts = make_matrix(QuantType::Q4_K, n_in, 40, 3, rng);
  Matrix dense6 = make_matrix(QuantType::Q6_K, n_in, 24, 1, rng);
  Matrix q8 = make_matrix(QuantType::Q8_0, n_in, 17, 1, rng);
  Matrix f32 = make_matrix(QuantType::F32, n_in, 5, 1, rng);
  const std::vector<float> x = random_rows(T, n_in, rng);
  PackSet packs(x.data(), T, n_in);

  // Expert e runs on tokens [t0, t0 + n); the dense ones on every token.
  struct Slice { uint64_t e; int64_t t0, n; };
  const Slice slices[] = {{0, 0, 5}, {1, 5, 1}, {2, 6, 7}};
  std::vector<std::vector<float>> ys;
  std::vector<MatJob> jobs;
  for (const Slice& s : slices) {
    ys.emplace_back(static_cast<size_t>(s.n * 40), -1.f);
    jobs.push_back({&experts.t, s.e, packs.get(QuantType::Q4_K), ys.back().data(), 40, s.t0, s.n});
  }
  for (const Matrix* m : {&dense6, &q8, &f32}) {
    ys.emplace_back(static_cast<size_t>(T) * m->t.ne[1], -1.f);
    jobs.push_back({&m->t, 0, packs.get(m->t.type), ys.back().data(), static_cast<int64_t>(m->t.ne[1])});
  }
  matmul_jobs(jobs, pool);

  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatJob& j = jobs[i];
    const int64_t n = j.n_tok >= 0 ? j.n_tok : T;
    const auto n_out = static_cast<int64_t>(j.w->ne[1]);
    std::vector<float> ref(static_cast<size_t>(n * n_out));
    matmul_reference(*j.w, j.matrix, &x[static_cast<size_t>(j.t0 * n_in)], n, ref.data(), pool);
    EXPECT_LT(rel_diff(ys[i].data(), ref.data(), ref.size()), 1e-5) << "job " << i << " (" << type_name(j.w->type) << ")";
  }
}

TEST(MatmulJobs, InterleavedQ4KMatchesAndIsBatchInvariant) {
  const cpu::KernelTable& k = cpu::kernels();
  if (k.gemm_x8[static_cast<int>(QuantType::Q4_K)] == nullptr) GTEST_SKIP() << "no interleaved Q4_K kernel at " << cpu::isa_name(k.isa);
  std::mt19937 rng(9);
  ThreadPool pool(2);
  const int64_t n_in = 1024, n_out = 72, T = 11;
  Matrix plain = make_matrix(QuantType::Q4_K, n_in, n_out, 2, rng);
  Matrix x8 = interleaved_copy(plain);
  const std::vector<float> x = random_rows(T, n_in, rng);
  for (uint64_t e = 0; e < 2; ++e) {
    std::vector<float> y_plain(static_cast<size_t>(T * n_out)), y_x8(y_plain.size());
    matmul(plain.t, e, x.data(), T, y_plain.data(), pool);
    matmul(x8.t, e, x.data(), T, y_x8.data(), pool);
    EXPECT_LT(rel_diff(y_x8.data(), y_plain.data(), y_plain.size()), 1e-5) << "matrix " << e;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> one(static_cast<size_t>(n_out));
      matmul(x8.t, e, &x[static_cast<size_t>(t * n_in)], 1, one.data(), pool);
      for (int64_t r = 0; r < n_out; ++r) ASSERT_EQ(one[r], y_x8[t * n_out + r]) << "matrix " << e << " token " << t << " row " << r;
    }
  }
}

// The tile kernels (gemm, several tokens) and the one-token dot kernels give the same
// numbers up to summation order, for every type with a tile kernel at this machine's ISA.
TEST(MatmulJobs, TileKernelsAgreeWithOneTokenDots) {
  const cpu::KernelTable& k = cpu::kernels();
  std::mt19937 rng(11);
  ThreadPool pool(2);
  int checked = 0;
  for (uint32_t ti = 0; ti < 64; ++ti) {
    if (k.gemm[ti] == nullptr) continue;
    for (const auto [n_in, n_out, T] : {std::array<int64_t, 3>{512, 40, 7}, {256, 3, 2}, {768, 17, 5}, {256, 64, 64}, {1024, 9, 13}}) {
    const auto type = static_cast<QuantType>(ti);
    Matrix m = make_matrix(type, n_in, n_out, 1, rng);
    const std::vector<float> x = random_rows(T, n_in, rng);
    std::vector<float> y(static_cast<size_t>(T * n_out)), ref(y.size());
    matmul(m.t, 0, x.data(), T, y.data(), pool);
    matmul_reference(m.t, 0, x.data(), T, ref.data(), pool);
    EXPECT_LT(rel_diff(y.data(), ref.data(), ref.size()), 1e-5) << type_name(type) << " tile vs reference, " << n_in << "x" << n_out << " T=" << T;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> one(static_cast<size_t>(n_out));
      matmul(m.t, 0, &x[static_cast<size_t>(t * n_in)], 1, one.data(), pool);
      EXPECT_LT(rel_diff(one.data(), &ref[static_cast<size_t>(t * n_out)], one.size()), 1e-5) << type_name(type) << " dot, token " << t;
    }
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no tile kernels at " << cpu::isa_name(k.isa);
}

// AVX2: the tile kernels and the one-token dots do the same arithmetic per (row, token)
// pair, so prefill and decode give bit-identical numbers (the model's batch == steps
// property rests on it where no interleaved layout exists).
// A token's dot alone (decode) and inside a batch (a tile) are the same float operations
// at every level this CPU has, so a batch and single tokens agree bit for bit (the model's
// batch == steps test depends on it; the AVX-512 dots once kept their float lanes apart and
// differed in the last bits, which flipped near-tie routing in that test).
TEST(MatmulJobs, TileKernelsAreBitIdenticalToOneTokenDotsAtEveryLevel) {
  int levels = 0;
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni}) {
    if (cpu::detect_hardware_isa() < isa) continue;
    ++levels;
    const cpu::KernelTable& k = cpu::kernels_for(isa);
    std::mt19937 rng(13);
    const int64_t n_out = 21, T = 11;
    int checked = 0;
    // 864 = 27 blocks of 32: a tail of three blocks after the groups of four (and MXFP4's
    // four-accumulator order on AVX2).
    for (int64_t n_in : {int64_t{768}, int64_t{864}})
    for (uint32_t ti = 0; ti < 64; ++ti) {
      if (k.gemm[ti] == nullptr) continue;
      const auto type = static_cast<QuantType>(ti);
      if (n_in % type_traits(type).block_elems != 0) continue;
      Matrix m = make_matrix(type, n_in, n_out, 1, rng);
      const std::vector<float> x = random_rows(T, n_in, rng);
      const size_t act_bytes = cpu::activation_row_bytes(type, n_in);
      std::vector<uint8_t> act(act_bytes * T);
      for (int64_t t = 0; t < T; ++t) {
        k.quantize[static_cast<uint32_t>(cpu::activation_type(type))](&x[static_cast<size_t>(t * n_in)],
                                                                      &act[t * act_bytes], n_in);
      }
      std::vector<float> tile(static_cast<size_t>(T * n_out)), dots(tile.size());
      k.gemm[ti](n_in, m.bytes.data(), m.t.row_bytes, n_out, act.data(), act_bytes, T, tile.data(), n_out);
      cpu::gemm_by_vec_dot(k.vec_dot[ti], n_in, m.bytes.data(), m.t.row_bytes, n_out, act.data(), act_bytes, T,
                           dots.data(), n_out);
      for (size_t i = 0; i < tile.size(); ++i) {
        ASSERT_EQ(tile[i], dots[i]) << cpu::isa_name(isa) << " " << type_name(type) << " n_in " << n_in << " pair "
                                    << i;
      }
      ++checked;
    }
    // AVX2: Q4_K Q5_K Q6_K IQ4_XS Q8_0 Q4_0 Q5_0 IQ4_NL MXFP4 at 768, the five 32-element
    // ones at 864; AVX-512: the same but MXFP4 (no tile there).
    EXPECT_GE(checked, isa == cpu::Isa::kAvx2 ? 8 + 5 : 8 + 4) << cpu::isa_name(isa);
  }
  if (levels == 0) GTEST_SKIP() << "no AVX2";
}

}  // namespace
}  // namespace mt
