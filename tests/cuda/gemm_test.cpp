// cuda/kernels/dequant.h and cuda/kernels/gemm.cu against the CPU ground truth: dequantize_rows bit-exact
// with quant/'s dequantize_row for every type (float out exactly, half/bf16 out as the
// exact floats rounded), and on ggml's golden vectors; gemm and gemm_experts against
// model/linear.h matmul_reference (max|d| / max|ref| within 2e-2 for quantized weights,
// 1e-3 for F32/F16/BF16); the dispatch table's default.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "cuda/kernels/dequant.h"
#include "cuda/kernels/dispatch.h"
#include "cuda/kernels/matmul.h"
#include "model/linear.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::to_host;

const QuantType kTypes[] = {QuantType::F32,  QuantType::F16,   QuantType::BF16, QuantType::Q4_0,
                            QuantType::Q4_1, QuantType::Q5_0,  QuantType::Q5_1, QuantType::Q8_0,
                            QuantType::IQ4_NL, QuantType::MXFP4, QuantType::Q2_K, QuantType::Q3_K,
                            QuantType::Q4_K, QuantType::Q5_K,  QuantType::Q6_K, QuantType::IQ4_XS};

bool is_float_type(QuantType t) { return t == QuantType::F32 || t == QuantType::F16 || t == QuantType::BF16; }

// n_mat matrices of n_out rows of n_in random weights (normal, sigma 0.05) in `type`.
struct HostMatrix {
  Tensor t;
  std::vector<uint8_t> bytes;
};

HostMatrix make_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, std::mt19937& rng) {
  HostMatrix m;
  m.t.type = type;
  m.t.ne = {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_mat), 1};
  m.t.row_bytes = *row_bytes(type, static_cast<uint64_t>(n_in));
  m.t.matrix_bytes = m.t.row_bytes * static_cast<uint64_t>(n_out);
  m.bytes.resize(m.t.matrix_bytes * static_cast<uint64_t>(n_mat));
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out * n_mat; ++r) {
    for (float& x : row) x = g(rng);
    quantize_row(type, row.data(), m.bytes.data() + static_cast<uint64_t>(r) * m.t.row_bytes, n_in);
  }
  m.t.data = m.bytes.data();
  return m;
}

DeviceMatrix device_view(const HostMatrix& m, const DeviceBuffer& data) {
  DeviceMatrix w;
  w.type = m.t.type;
  w.data = data.as<uint8_t>();
  w.n_in = static_cast<int64_t>(m.t.ne[0]);
  w.n_out = static_cast<int64_t>(m.t.ne[1]);
  w.n_mat = static_cast<int64_t>(m.t.ne[2]);
  w.row_bytes = m.t.row_bytes;
  w.matrix_bytes = m.t.matrix_bytes;
  return w;
}

std::vector<float> random_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (float& x : v) x = g(rng);
  return v;
}

// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(b[i])));
  }
  return d / std::max(m, 1e-30);
}

double tolerance(QuantType t) { return is_float_type(t) ? 1e-3 : 2e-2; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CudaDequantize, RowsBitExactWithTheReferenceEveryType) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(11);
  const int64_t n = 512, n_rows = 5;
  for (QuantType type : kTypes) {
    SCOPED_TRACE(type_name(type));
    HostMatrix m = make_matrix(type, n, n_rows, 1, rng);
    // Row 3: zeros and tiny values (zero scales, subnormal halves); row 4: large values.
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = i < 64 ? 0.f : 1e-6f * static_cast<float>(i % 7 - 3);
    quantize_row(type, row.data(), m.bytes.data() + 3 * m.t.row_bytes, n);
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = 300.f * static_cast<float>(i % 11 - 5);
    quantize_row(type, row.data(), m.bytes.data() + 4 * m.t.row_bytes, n);

    std::vector<float> ref(static_cast<size_t>(n * n_rows));
    for (int64_t r = 0; r < n_rows; ++r) dequantize_row(type, m.t.row(static_cast<uint64_t>(r)), &ref[r * n], n);
    const DeviceBuffer src = to_device(m.bytes);
    DeviceBuffer out_f32(ref.size() * sizeof(float)), out_f16(ref.size() * 2), out_bf16(ref.size() * 2);
    dequantize_rows(type, src.as<uint8_t>(), m.t.row_bytes, n_rows, n, out_f32.as<float>(), nullptr);
    dequantize_rows(type, src.as<uint8_t>(), m.t.row_bytes, n_rows, n, out_f16.as<__half>(), nullptr);
    dequantize_rows(type, src.as<uint8_t>(), m.t.row_bytes, n_rows, n, out_bf16.as<__nv_bfloat16>(), nullptr);
    const std::vector<float> got = to_host<float>(out_f32, ref.size());
    const std::vector<uint16_t> got16 = to_host<uint16_t>(out_f16, ref.size());
    const std::vector<uint16_t> gotbf = to_host<uint16_t>(out_bf16, ref.size());
    ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got16[i], fp32_to_fp16(ref[i])) << "f16 element " << i;
      ASSERT_EQ(gotbf[i], fp32_to_bf16(ref[i])) << "bf16 element " << i;
    }
  }
}

// Rows of a length that is not a multiple of 8 take the one-element-per-thread kernel.
TEST(CudaDequantize, OddLengthFloatRowsBitExact) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(12);
  const int64_t n = 36, n_rows = 3;
  for (QuantType type : {QuantType::F32, QuantType::F16, QuantType::BF16}) {
    SCOPED_TRACE(type_name(type));
    const HostMatrix m = make_matrix(type, n, n_rows, 1, rng);
    std::vector<float> ref(static_cast<size_t>(n * n_rows));
    for (int64_t r = 0; r < n_rows; ++r) dequantize_row(type, m.t.row(static_cast<uint64_t>(r)), &ref[r * n], n);
    const DeviceBuffer src = to_device(m.bytes);
    DeviceBuffer out(ref.size() * sizeof(float));
    dequantize_rows(type, src.as<uint8_t>(), m.t.row_bytes, n_rows, n, out.as<float>(), nullptr);
    const std::vector<float> got = to_host<float>(out, ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  }
}

TEST(CudaDequantize, GoldenVectorsBitExact) {
  MT_SKIP_WITHOUT_DEVICE();
  const std::string dir = std::string(MOETIER_TESTDATA_DIR) + "/quant_golden/";
  const int64_t n = 512;
  for (QuantType type : kTypes) {
    if (is_float_type(type)) continue;
    SCOPED_TRACE(type_name(type));
    const std::vector<uint8_t> q = read_bytes(dir + type_name(type) + ".q.bin");
    const std::vector<uint8_t> deq = read_bytes(dir + type_name(type) + ".deq.f32");
    ASSERT_EQ(q.size(), *row_bytes(type, n));
    ASSERT_EQ(deq.size(), n * sizeof(float));
    const DeviceBuffer src = to_device(q);
    DeviceBuffer out(n * sizeof(float));
    dequantize_rows(type, src.as<uint8_t>(), q.size(), 1, n, out.as<float>(), nullptr);
    const std::vector<float> got = to_host<float>(out, n);
    EXPECT_EQ(std::memcmp(got.data(), deq.data(), deq.size()), 0);
  }
}

TEST(CudaGemm, MatchesTheReferenceEveryTypeAndShape) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const int64_t n_in = 512;
  for (QuantType type : kTypes) {
    for (int64_t n_out : {64, 200}) {
      HostMatrix m = make_matrix(type, n_in, n_out, 2, rng);
      const DeviceBuffer wbuf = to_device(m.bytes);
      const DeviceMatrix w = device_view(m, wbuf);
      for (int n_tokens : {1, 9, 64}) {
        SCOPED_TRACE(std::string(type_name(type)) + " n_out " + std::to_string(n_out) + " T " +
                     std::to_string(n_tokens));
        const std::vector<float> x = random_rows(n_tokens, n_in, rng);
        std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
        matmul_reference(m.t, 1, x.data(), n_tokens, ref.data(), pool);
        const DeviceBuffer xd = to_device(x);
        DeviceBuffer yd(ref.size() * sizeof(float));
        Workspace ws(gemm_workspace_bytes(w, n_tokens, 1));
        gemm(w, 1, xd.as<float>(), n_tokens, yd.as<float>(), ws, nullptr);
        const std::vector<float> y = to_host<float>(yd, ref.size());
        EXPECT_LT(rel_diff(y, ref), tolerance(type));
      }
    }
  }
}

// Slot s = t * K + k of token t uses expert ids[s] (K distinct experts per token, random;
// with `holes`, some slots are -1 and their rows must stay untouched).
std::vector<int32_t> random_ids(int n_tokens, int K, int n_expert, bool holes, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens * K));
  std::vector<int32_t> all(static_cast<size_t>(n_expert));
  for (int e = 0; e < n_expert; ++e) all[static_cast<size_t>(e)] = e;
  for (int t = 0; t < n_tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int k = 0; k < K; ++k) ids[static_cast<size_t>(t * K + k)] = all[static_cast<size_t>(k)];
  }
  if (holes) {
    for (size_t s = 0; s < ids.size(); s += 5) ids[s] = -1;
  }
  return ids;
}

struct ExpertShape {
  int64_t n_in = 256, n_out = 200;
  int n_expert = 8, K = 3;
};

void check_experts(QuantType type, int n_tokens, bool x_per_slot, bool holes, std::mt19937& rng, ThreadPool& pool,
                   const ExpertShape& shape = {}) {
  const int64_t n_in = shape.n_in, n_out = shape.n_out;
  const int n_expert = shape.n_expert, K = shape.K;
  SCOPED_TRACE(std::string(type_name(type)) + " T " + std::to_string(n_tokens) + (x_per_slot ? " per-slot" : "") +
               (holes ? " holes" : ""));
  HostMatrix m = make_matrix(type, n_in, n_out, n_expert, rng);
  const DeviceBuffer wbuf = to_device(m.bytes);
  const DeviceMatrix w = device_view(m, wbuf);
  const int n_slots = n_tokens * K;
  const std::vector<int32_t> ids = random_ids(n_tokens, K, n_expert, holes, rng);
  const std::vector<float> x = random_rows(x_per_slot ? n_slots : n_tokens, n_in, rng);
  constexpr float kUntouched = 12345.f;
  std::vector<float> ref(static_cast<size_t>(n_slots * n_out), kUntouched);
  for (int s = 0; s < n_slots; ++s) {
    const int32_t e = ids[static_cast<size_t>(s)];
    if (e < 0) continue;
    const float* xr = x.data() + static_cast<int64_t>(x_per_slot ? s : s / K) * n_in;
    matmul_reference(m.t, static_cast<uint64_t>(e), xr, 1, ref.data() + static_cast<int64_t>(s) * n_out, pool);
  }
  const DeviceBuffer xd = to_device(x), idd = to_device(ids);
  const DeviceBuffer yd = to_device(std::vector<float>(ref.size(), kUntouched));
  Workspace ws(gemm_workspace_bytes(w, n_tokens, K));
  gemm_experts(w, {idd.as<int32_t>(), n_tokens, K, x_per_slot}, xd.as<float>(), yd.as<float>(), ws, nullptr);
  const std::vector<float> y = to_host<float>(yd, ref.size());
  std::vector<float> y_used, ref_used;  // the rows of slots with an expert
  for (int s = 0; s < n_slots; ++s) {
    const auto row = static_cast<int64_t>(s) * n_out;
    if (ids[static_cast<size_t>(s)] < 0) {
      for (int64_t j = 0; j < n_out; ++j) ASSERT_EQ(y[row + j], kUntouched) << "slot " << s;
    } else {
      y_used.insert(y_used.end(), y.begin() + row, y.begin() + row + n_out);
      ref_used.insert(ref_used.end(), ref.begin() + row, ref.begin() + row + n_out);
    }
  }
  EXPECT_LT(rel_diff(y_used, ref_used), tolerance(type));
}

TEST(CudaGemm, ExpertsMatchThePerExpertReference) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  ThreadPool pool(2);
  for (QuantType type : kTypes) {
    for (int n_tokens : {1, 9, 64}) {
      for (bool per_slot : {false, true}) check_experts(type, n_tokens, per_slot, false, rng, pool);
    }
  }
}

TEST(CudaGemm, ExpertsSkipSlotsWithNegativeIds) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(4);
  ThreadPool pool(2);
  for (bool per_slot : {false, true}) check_experts(QuantType::Q4_K, 37, per_slot, true, rng, pool);
}

TEST(CudaGemm, ExpertsInSeveralTileGroupsAndInRowTiles) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  ThreadPool pool(2);
  // 64 MiB tiles (cuda/kernels/gemm.cu): 4 experts of 2048 x 4096 per tile, so 9 experts take
  // several groups; one 8300 x 4096 expert is larger than a tile and goes by row tiles.
  check_experts(QuantType::Q4_0, 6, false, false, rng, pool, {4096, 2048, 9, 3});
  check_experts(QuantType::Q8_0, 3, true, false, rng, pool, {4096, 8300, 2, 1});
}

TEST(CudaGemm, ExpertsWithUnalignedShapes) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(6);
  ThreadPool pool(2);
  // n_out 201: batched Y strides rounded up to 16 bytes; F16 rows of 36 (72 bytes): no
  // batched product, one cublasGemmEx per expert.
  check_experts(QuantType::Q4_K, 9, false, false, rng, pool, {256, 201, 8, 3});
  check_experts(QuantType::F16, 5, true, false, rng, pool, {36, 201, 4, 2});
}

TEST(CudaGemm, LargeMatrixUsesSeveralTiles) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(9);
  ThreadPool pool(2);
  // 64 MiB tiles of F16 at n_in 4096 hold 8192 rows (cuda/kernels/gemm.cu): 8300 rows take two.
  const int64_t n_in = 4096, n_out = 8300;
  const int n_tokens = 17;
  HostMatrix m = make_matrix(QuantType::Q8_0, n_in, n_out, 1, rng);
  const DeviceBuffer wbuf = to_device(m.bytes);
  const DeviceMatrix w = device_view(m, wbuf);
  const std::vector<float> x = random_rows(n_tokens, n_in, rng);
  std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
  matmul_reference(m.t, 0, x.data(), n_tokens, ref.data(), pool);
  const DeviceBuffer xd = to_device(x);
  DeviceBuffer yd(ref.size() * sizeof(float));
  Workspace ws(gemm_workspace_bytes(w, n_tokens, 1));
  gemm(w, 0, xd.as<float>(), n_tokens, yd.as<float>(), ws, nullptr);
  EXPECT_LT(rel_diff(to_host<float>(yd, ref.size()), ref), 2e-2);
}

TEST(CudaDispatch, UnknownArchitecturesUseTheMmvqLimit) {
  MT_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(mmvq_max_tokens(1, QuantType::Q4_K, false), kMmvqMaxTokens);
  EXPECT_EQ(mmvq_max_tokens(1, QuantType::Q4_K, true), kMmvqMaxTokens);
  EXPECT_GT(current_sm(), 0);
}

TEST(CudaDispatch, MatmulMatchesTheReferenceOnBothSidesOfTheLimit) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(21);
  ThreadPool pool(2);
  const int64_t n_in = 512, n_out = 96;
  for (QuantType type : {QuantType::Q4_K, QuantType::Q8_0, QuantType::F16}) {
    if (!supports(type)) continue;
    HostMatrix m = make_matrix(type, n_in, n_out, 1, rng);
    const DeviceBuffer wbuf = to_device(m.bytes);
    const DeviceMatrix w = device_view(m, wbuf);
    for (int n_tokens : {1, 8, 9, 40}) {
      SCOPED_TRACE(std::string(type_name(type)) + " T " + std::to_string(n_tokens));
      const std::vector<float> x = random_rows(n_tokens, n_in, rng);
      std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
      matmul_reference(m.t, 0, x.data(), n_tokens, ref.data(), pool);
      const DeviceBuffer xd = to_device(x);
      DeviceBuffer yd(ref.size() * sizeof(float));
      Workspace ws(matmul_workspace_bytes(w, n_tokens, 1));
      matmul(w, 0, xd.as<float>(), n_tokens, yd.as<float>(), ws, nullptr);
      EXPECT_LT(rel_diff(to_host<float>(yd, ref.size()), ref), 2e-2);
    }
  }
}

}  // namespace
}  // namespace mt::cuda
