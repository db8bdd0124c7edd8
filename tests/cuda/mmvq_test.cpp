// cuda/mmvq.h on the device against two host references, for every supported type:
//  * exact: W dequantized by quant/, X as the kernel sees it (quant/'s reference Q8_1
//    round trip for quantized weights, raw f32 for float weights; Q4_1 / Q5_1 with the
//    half-rounded s the int8 dot uses), dot products in double. Only float rounding
//    order separates the kernel from it: max|d| within 1e-4 of max(max|ref|, the largest
//    sqrt(sum (w_i x_i)^2)), so every index or layout slip shows.
//  * parity: model/linear.h matmul_reference (X rounded as the CPU rounds it: Q8_K for
//    the K-quants, Q8_0 / Q8_1 for the others, F16 / BF16 for those weights) over n_out
//    512 x 8 tokens, max|d| / max|ref| within 2e-2 for quantized types (the activation
//    formats differ: measured ~1e-2 for the K-quants), 1e-3 for F32 / F16, 4e-3 for BF16.
// Also: the device Q8_1 quantizer equals quant/'s byte for byte, misaligned weight bases
// take the byte-safe loads, and the routed form (ids on the device, repeated experts,
// x_per_slot both ways, a skipped slot) equals the per-slot reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "cuda/mmvq.h"
#include "cuda_test_util.h"
#include "model/linear.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::to_host;

const QuantType kTypes[] = {QuantType::F32,  QuantType::F16,   QuantType::BF16, QuantType::Q4_0,
                            QuantType::Q4_1, QuantType::Q5_0,  QuantType::Q5_1, QuantType::Q8_0,
                            QuantType::IQ4_NL, QuantType::MXFP4, QuantType::Q2_K, QuantType::Q3_K,
                            QuantType::Q4_K, QuantType::Q5_K,  QuantType::Q6_K, QuantType::IQ4_XS};

bool is_float(QuantType t) { return t == QuantType::F32 || t == QuantType::F16 || t == QuantType::BF16; }
bool has_min_s(QuantType t) { return t == QuantType::Q4_1 || t == QuantType::Q5_1; }

// n_mat matrices (n_out, n_in) of random weights in `type`, and their dequantized rows.
struct HostMatrix {
  QuantType type;
  int64_t n_in, n_out, n_mat;
  uint64_t row_bytes, matrix_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> rows;  // (n_mat * n_out, n_in)

  Tensor tensor() const {
    Tensor t;
    t.type = type;
    t.ne = {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_mat), 1};
    t.data = bytes.data();
    t.row_bytes = row_bytes;
    t.matrix_bytes = matrix_bytes;
    return t;
  }
};

HostMatrix make_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, std::mt19937& rng) {
  HostMatrix m{type, n_in, n_out, n_mat, *row_bytes(type, static_cast<uint64_t>(n_in)), 0, {}, {}};
  m.matrix_bytes = m.row_bytes * static_cast<uint64_t>(n_out);
  m.bytes.resize(m.matrix_bytes * static_cast<uint64_t>(n_mat));
  m.rows.resize(static_cast<size_t>(n_mat * n_out * n_in));
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_mat * n_out; ++r) {
    for (float& v : row) v = g(rng);
    uint8_t* dst = m.bytes.data() + static_cast<uint64_t>(r) * m.row_bytes;
    quantize_row(type, row.data(), dst, n_in);
    dequantize_row(type, dst, &m.rows[static_cast<size_t>(r * n_in)], n_in);
  }
  return m;
}

std::vector<float> random_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (float& x : v) x = g(rng);
  return v;
}

// One activation row as the kernel sees it, and (Q4_1 / Q5_1) per block s - d * sum(q).
struct KernelX {
  std::vector<float> x;
  std::vector<double> s_excess;
};
KernelX kernel_x(QuantType type, const float* x, int64_t n) {
  KernelX k{std::vector<float>(x, x + n), {}};
  if (type == QuantType::F16 || type == QuantType::BF16) {  // X rounded to the weight's type, as the CPU does
    for (float& v : k.x) v = type == QuantType::F16 ? fp16_to_fp32(fp32_to_fp16(v)) : bf16_to_fp32(fp32_to_bf16(v));
  }
  if (is_float(type)) return k;
  std::vector<BlockQ8_1> q(static_cast<size_t>(n / 32));
  quantize_row(QuantType::Q8_1, x, q.data(), n);
  dequantize_row(QuantType::Q8_1, q.data(), k.x.data(), n);
  for (const BlockQ8_1& b : q) {
    int sum = 0;
    for (int8_t v : b.qs) sum += v;
    k.s_excess.push_back(static_cast<double>(fp16_to_fp32(b.s)) - static_cast<double>(fp16_to_fp32(b.d)) * sum);
  }
  return k;
}

// Exact reference of one output, and its norm scale sqrt(sum (w_i x_i)^2).
struct Ref {
  double y, scale;
};
Ref exact_dot(const HostMatrix& m, int64_t mat, int64_t row, const KernelX& x) {
  const float* w = &m.rows[static_cast<size_t>((mat * m.n_out + row) * m.n_in)];
  double acc = 0, sq = 0;
  for (int64_t i = 0; i < m.n_in; ++i) {
    const double p = static_cast<double>(w[i]) * x.x[static_cast<size_t>(i)];
    acc += p;
    sq += p * p;
  }
  if (has_min_s(m.type)) {  // the int8 dot adds m * s with s rounded to half
    const uint8_t* r = m.bytes.data() + mat * m.matrix_bytes + row * m.row_bytes;
    const size_t block = type_traits(m.type).block_bytes;
    for (size_t b = 0; b < x.s_excess.size(); ++b) {
      uint16_t mh;
      std::memcpy(&mh, r + b * block + 2, sizeof(mh));  // Q4_1 / Q5_1: m at offset 2
      acc += static_cast<double>(fp16_to_fp32(mh)) * x.s_excess[b];
    }
  }
  return {acc, std::sqrt(sq)};
}

// Accumulates max|got - ref| against max(max|ref|, max scale).
struct Diff {
  double d = 0, ref = 0, scale = 0;
  void add(float got, const Ref& r) {
    d = std::max(d, std::fabs(static_cast<double>(got) - r.y));
    ref = std::max(ref, std::fabs(r.y));
    scale = std::max(scale, r.scale);
  }
  double rel() const { return d / std::max({ref, scale, 1e-30}); }
};
constexpr double kExactTol = 1e-4;

double parity_tol(QuantType t) {
  return is_float(t) ? 1e-3 : 2e-2;
}

// The device copy of a host matrix, its base `offset` bytes into the allocation.
struct DeviceCopy {
  DeviceBuffer buf;
  DeviceMatrix w;
};
DeviceCopy upload(const HostMatrix& m, int64_t n_out, size_t offset) {
  DeviceCopy c{DeviceBuffer(m.bytes.size() + offset), {}};
  uint8_t* base = c.buf.as<uint8_t>() + offset;
  MT_CUDA_CHECK(cudaMemcpy(base, m.bytes.data(), m.bytes.size(), cudaMemcpyHostToDevice));
  c.w = {m.type, base, m.n_in, n_out, m.n_mat, m.row_bytes, m.matrix_bytes};
  return c;
}

// mmvq of matrix `mat` on the first n_tokens rows of x (host) -> (n_tokens, n_out).
std::vector<float> run_mmvq(const DeviceMatrix& w, int64_t mat, const std::vector<float>& x, int n_tokens) {
  const DeviceBuffer dx = to_device(x);
  DeviceBuffer dy(static_cast<size_t>(n_tokens * w.n_out) * sizeof(float));
  Workspace ws(mmvq_workspace_bytes(w, n_tokens, 1));
  mmvq(w, mat, dx.as<float>(), n_tokens, dy.as<float>(), ws, nullptr);
  MT_CUDA_CHECK(cudaGetLastError());
  return to_host<float>(dy, static_cast<size_t>(n_tokens * w.n_out));
}

std::vector<int64_t> widths(QuantType t) {
  std::vector<int64_t> n = {256, 2048, 4352};
  if (type_traits(t).block_elems == 1 || type_traits(t).block_elems == 32) n.push_back(2880);  // gpt-oss width
  if (is_float(t)) n.push_back(100);  // not a multiple of 8: the scalar path
  return n;
}

TEST(Mmvq, SupportsEveryTypeTheCpuComputes) {
  for (QuantType t : kTypes) EXPECT_TRUE(supports(t)) << type_name(t);
  EXPECT_FALSE(supports(QuantType::IQ2_XXS));
}

TEST(Mmvq, Q8_1ActivationsEqualTheReferenceQuantizer) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  const int rows = 3, n = 4352;
  std::vector<float> x = random_rows(rows, n, rng);
  for (int i = 64; i < 96; ++i) x[static_cast<size_t>(i)] = 0.f;  // an all-zero block
  x[200] = 1e4f;
  x[n + 7] = -3e-6f;
  const DeviceBuffer dx = to_device(x);
  DeviceBuffer qs(static_cast<size_t>(rows) * n), meta(static_cast<size_t>(rows) * n / 32 * 2 * sizeof(uint32_t));
  quantize_q8_1(dx.as<float>(), rows, n, qs.as<int8_t>(), meta.as<uint32_t>(), nullptr);
  const std::vector<int8_t> got_qs = to_host<int8_t>(qs, static_cast<size_t>(rows) * n);
  const std::vector<uint32_t> got_meta = to_host<uint32_t>(meta, static_cast<size_t>(rows) * n / 32 * 2);
  for (int r = 0; r < rows; ++r) {
    std::vector<BlockQ8_1> ref(n / 32);
    quantize_row(QuantType::Q8_1, &x[static_cast<size_t>(r) * n], ref.data(), n);
    for (int b = 0; b < n / 32; ++b) {
      SCOPED_TRACE(testing::Message() << "row " << r << " block " << b);
      const size_t at = static_cast<size_t>(r) * (n / 32) + b;
      ASSERT_EQ(got_meta[2 * at] & 0xFFFFu, ref[b].d);
      ASSERT_EQ(got_meta[2 * at] >> 16, ref[b].s);
      ASSERT_EQ(0, std::memcmp(&got_qs[at * 32], ref[b].qs, 32));
      int lo = 0, hi = 0;
      for (int j = 0; j < 16; ++j) lo += ref[b].qs[j], hi += ref[b].qs[16 + j];
      ASSERT_EQ(static_cast<int16_t>(got_meta[2 * at + 1] & 0xFFFFu), lo);
      ASSERT_EQ(static_cast<int16_t>(got_meta[2 * at + 1] >> 16), hi);
    }
  }
}

TEST(Mmvq, EveryTypeShapeAndTokenCountMatchesTheReferences) {
  MT_SKIP_WITHOUT_DEVICE();
  ThreadPool pool(2);
  std::mt19937 rng(11);
  constexpr int kT = kMmvqMaxTokens;
  for (QuantType type : kTypes) {
    for (int64_t n_in : widths(type)) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in);
      const HostMatrix m = make_matrix(type, n_in, 512, 1, rng);
      const std::vector<float> x = random_rows(kT, n_in, rng);
      std::vector<Ref> ref(static_cast<size_t>(kT * m.n_out));  // (token, row)
      for (int t = 0; t < kT; ++t) {
        const KernelX kx = kernel_x(type, &x[static_cast<size_t>(t * n_in)], n_in);
        for (int64_t r = 0; r < m.n_out; ++r) ref[static_cast<size_t>(t * m.n_out + r)] = exact_dot(m, 0, r, kx);
      }
      const DeviceCopy full = upload(m, 512, 0);
      for (int64_t n_out : {int64_t{1}, int64_t{37}, int64_t{512}}) {
        DeviceMatrix w = full.w;
        w.n_out = n_out;
        for (int T = 1; T <= kT; ++T) {
          const std::vector<float> y = run_mmvq(w, 0, x, T);
          Diff diff;
          for (int t = 0; t < T; ++t) {
            for (int64_t r = 0; r < n_out; ++r) diff.add(y[static_cast<size_t>(t * n_out + r)], ref[static_cast<size_t>(t * m.n_out + r)]);
          }
          EXPECT_LT(diff.rel(), kExactTol) << "n_out " << n_out << " tokens " << T;
          if (n_out == 512 && T == kT) {
            std::vector<float> cpu(y.size());
            matmul_reference(m.tensor(), 0, x.data(), kT, cpu.data(), pool);
            double d = 0, mx = 0;
            for (size_t i = 0; i < y.size(); ++i) {
              d = std::max(d, static_cast<double>(std::fabs(y[i] - cpu[i])));
              mx = std::max(mx, static_cast<double>(std::fabs(cpu[i])));
            }
            EXPECT_LT(d / mx, parity_tol(type)) << "vs matmul_reference";
          }
        }
      }
    }
  }
}

TEST(Mmvq, MisalignedWeightBasesTakeTheByteSafeLoads) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(17);
  for (QuantType type : kTypes) {
    const int64_t n_in = 2048, n_out = 37;
    const HostMatrix m = make_matrix(type, n_in, n_out, 1, rng);
    const std::vector<float> x = random_rows(3, n_in, rng);
    for (size_t offset : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " offset " << offset);
      const DeviceCopy c = upload(m, n_out, offset);
      const std::vector<float> y = run_mmvq(c.w, 0, x, 3);
      Diff diff;
      for (int t = 0; t < 3; ++t) {
        const KernelX kx = kernel_x(type, &x[static_cast<size_t>(t * n_in)], n_in);
        for (int64_t r = 0; r < n_out; ++r) diff.add(y[static_cast<size_t>(t * n_out + r)], exact_dot(m, 0, r, kx));
      }
      EXPECT_LT(diff.rel(), kExactTol);
    }
  }
}

// Slot s of a routed batch against the exact reference of matrix ids[s] on its X row.
void check_routed(const HostMatrix& m, const DeviceMatrix& w, int T, int K, bool x_per_slot, std::mt19937& rng) {
  const int slots = T * K;
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(m.n_mat - 1));
  for (int32_t& id : ids) id = pick(rng);
  const std::vector<float> x = random_rows(x_per_slot ? slots : T, m.n_in, rng);
  const DeviceBuffer dids = to_device(ids), dx = to_device(x);
  DeviceBuffer dy(static_cast<size_t>(slots * m.n_out) * sizeof(float));
  Workspace ws(mmvq_workspace_bytes(w, T, K));
  mmvq_experts(w, dids.as<int32_t>(), T, K, dx.as<float>(), x_per_slot, dy.as<float>(), ws, nullptr);
  MT_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(slots * m.n_out));
  Diff diff;
  for (int s = 0; s < slots; ++s) {
    const int xr = x_per_slot ? s : s / K;
    const KernelX kx = kernel_x(m.type, &x[static_cast<size_t>(xr * m.n_in)], m.n_in);
    for (int64_t r = 0; r < m.n_out; ++r) diff.add(y[static_cast<size_t>(s * m.n_out + r)], exact_dot(m, ids[s], r, kx));
  }
  EXPECT_LT(diff.rel(), kExactTol);
}

TEST(MmvqExperts, RoutedSlotsMatchThePerSlotReference) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(23);
  for (QuantType type : kTypes) {
    // 768: a Qwen3-30B-A3B down projection (8 or 16 lanes per row); then 32 lanes per row.
    for (int64_t n_in : {int64_t{768}, type_traits(type).block_elems == 256 ? int64_t{2048} : int64_t{2880}}) {
      const HostMatrix m = make_matrix(type, n_in, 70, 5, rng);
      const DeviceCopy c = upload(m, m.n_out, 0);
      for (int T : {1, 3}) {
        for (int K : {2, 8}) {  // K = 8 > 5 experts: experts repeat within a token
          for (bool x_per_slot : {false, true}) {
            SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in << " T " << T << " K " << K
                                            << " x_per_slot " << x_per_slot);
            check_routed(m, c.w, T, K, x_per_slot, rng);
          }
        }
      }
    }
  }
}

TEST(MmvqExperts, ANegativeIdLeavesItsSlotUntouched) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(29);
  const int64_t n_in = 256, n_out = 9;
  const HostMatrix m = make_matrix(QuantType::Q4_K, n_in, n_out, 2, rng);
  const DeviceCopy c = upload(m, n_out, 0);
  const std::vector<int32_t> ids = {1, -1, 0};
  const std::vector<float> x = random_rows(1, n_in, rng);
  const DeviceBuffer dids = to_device(ids), dx = to_device(x);
  const DeviceBuffer dy = to_device(std::vector<float>(static_cast<size_t>(3 * n_out), 7.f));
  Workspace ws(mmvq_workspace_bytes(c.w, 1, 3));
  mmvq_experts(c.w, dids.as<int32_t>(), 1, 3, dx.as<float>(), false, dy.as<float>(), ws, nullptr);
  const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(3 * n_out));
  const KernelX kx = kernel_x(QuantType::Q4_K, x.data(), n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    EXPECT_EQ(y[static_cast<size_t>(n_out + r)], 7.f) << "row " << r;
    EXPECT_NEAR(y[static_cast<size_t>(r)], exact_dot(m, 1, r, kx).y, 1e-3) << "row " << r;
    EXPECT_NEAR(y[static_cast<size_t>(2 * n_out + r)], exact_dot(m, 0, r, kx).y, 1e-3) << "row " << r;
  }
}

}  // namespace
}  // namespace mt::cuda
