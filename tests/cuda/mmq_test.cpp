// cuda/kernels/mmq.h on the device, for every type it supports, against two host references:
//  * tight: W dequantized by quant/, X quantized and dequantized by quant/'s reference
//    quantizer of the weight type's activation mode (Q8_0 / Q8_K: the bytes the device
//    quantizer produces), dot products in double. The kernel's integer sub-block dots are
//    exact, so only f32 scaling and summation separate it from this: per Y row, max|d|
//    within 1e-5 of the row's max|ref|; every index, fragment or layout slip shows.
//  * loose: the plain product with f32 X (activation quantization noise), max|d| within
//    3e-2 of max|ref| over the whole product.
// Dense products at 9, 33, 100 and 512 tokens with n_out not a multiple of the 128-row
// tile and n_in with partial 256-element stages (32-element types); routed products over
// 128 experts, top-8, x_per_slot both ways, every column-tile width, with skipped slots
// (their Y rows must keep a sentinel), an expert with no slot and one with a slot in
// every token; the qwen3-30b-a3b expert shapes; the device route (sort + tile table) at
// 32768 slots x 512 experts; a routed product captured in a CUDA graph (no host sync)
// replaying bit-identically; matmul()/matmul_experts() taking mmq above the mmvq limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "cuda/kernels/dispatch.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/mmq_kernels.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::to_host;

const QuantType kTypes[] = {QuantType::Q4_0, QuantType::Q5_0,   QuantType::Q8_0, QuantType::IQ4_NL,
                            QuantType::MXFP4, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};

constexpr double kTight = 1e-5;
constexpr double kLoose = 3e-2;  // a host emulation of the kernel gave up to 1.2e-2
constexpr float kUntouched = 12345.f;

bool is_k_quant(QuantType t) { return type_traits(t).block_elems == 256; }

ThreadPool& pool() {
  static ThreadPool p(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u)));
  return p;
}

// n_mat matrices (n_out, n_in) in `type`, and their rows dequantized by quant/.
struct HostMatrix {
  QuantType type;
  int64_t n_in, n_out, n_mat;
  uint64_t row_bytes, matrix_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> rows;  // (n_mat * n_out, n_in)

  const float* row(int64_t mat, int64_t r) const { return &rows[static_cast<size_t>((mat * n_out + r) * n_in)]; }
};

// Byte offsets of the half scales a raw block needs finite: d and (Q4_K, Q5_K) dmin.
std::vector<size_t> scale_offsets(QuantType t) {
  switch (t) {
    case QuantType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case QuantType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case QuantType::Q6_K: return {offsetof(BlockQ6_K, d)};
    case QuantType::MXFP4: return {};  // an E8M0 byte: set apart (make_matrix)
    default: return {0};  // Q4_0, Q5_0, Q8_0, IQ4_NL: d first
  }
}

// raw == false: quantized from normal weights (sigma 0.05). raw == true: every byte
// random, then finite scales in +-0.02, so every code, packed scale, min and sign of the
// format occurs (Q8_0's -128 included).
HostMatrix make_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, bool raw, std::mt19937& rng) {
  HostMatrix m{type, n_in, n_out, n_mat, *row_bytes(type, static_cast<uint64_t>(n_in)), 0, {}, {}};
  m.matrix_bytes = m.row_bytes * static_cast<uint64_t>(n_out);
  m.bytes.resize(m.matrix_bytes * static_cast<uint64_t>(n_mat));
  const int64_t n_rows = n_mat * n_out;
  if (raw) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
    const size_t block = type_traits(type).block_bytes;
    for (size_t at = 0; at < m.bytes.size(); at += block) {
      for (size_t off : scale_offsets(type)) {
        const half_bits h = fp32_to_fp16(scale(rng));
        std::memcpy(&m.bytes[at + off], &h, sizeof(h));
      }
      if (type == QuantType::MXFP4) m.bytes[at] = static_cast<uint8_t>(118 + byte(rng) % 8);  // 2^-10 .. 2^-3
    }
  } else {
    std::normal_distribution<float> g(0.f, 0.05f);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_rows; ++r) {
      for (float& v : row) v = g(rng);
      quantize_row(type, row.data(), m.bytes.data() + static_cast<uint64_t>(r) * m.row_bytes, n_in);
    }
  }
  m.rows.resize(static_cast<size_t>(n_rows * n_in));
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* src = m.bytes.data() + static_cast<uint64_t>(r) * m.row_bytes;
    dequantize_row(type, src, &m.rows[static_cast<size_t>(r * n_in)], n_in);
  }
  return m;
}

struct DeviceCopy {
  DeviceBuffer buf;
  DeviceMatrix w;
};
DeviceCopy upload(const HostMatrix& m) {
  DeviceCopy c{to_device(m.bytes), {}};
  c.w = {m.type, c.buf.as<uint8_t>(), m.n_in, m.n_out, m.n_mat, m.row_bytes, m.matrix_bytes};
  return c;
}

std::vector<float> random_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (float& x : v) x = g(rng);
  return v;
}

// The activation rows as the kernel sees them: quant/'s reference quantizer of the
// weight type's activation mode, dequantized.
std::vector<float> kernel_x(QuantType weight, const std::vector<float>& x, int64_t n) {
  const ActQuant mode = act_quant_for(weight);
  const QuantType at = mode == ActQuant::kQ8_0   ? QuantType::Q8_0
                       : mode == ActQuant::kQ8_1 ? QuantType::Q8_1
                                                 : QuantType::Q8_K;
  std::vector<uint8_t> buf(*row_bytes(at, static_cast<uint64_t>(n)));
  std::vector<float> out(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    quantize_row(at, &x[r * n], buf.data(), n);
    dequantize_row(at, buf.data(), &out[r * n], n);
  }
  return out;
}

// One Y row's product: matrix `mat` (< 0: none) on X row x_row.
struct RowJob {
  int64_t mat, x_row;
};

// ref[j * n_out + o] = W[mat_j] row o . x row x_row_j in double (jobs without a matrix: 0).
std::vector<double> reference(const HostMatrix& m, const std::vector<float>& x, const std::vector<RowJob>& jobs) {
  std::vector<double> ref(jobs.size() * static_cast<size_t>(m.n_out), 0.0);
  pool().parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const RowJob& job = jobs[static_cast<size_t>(j)];
      if (job.mat < 0) continue;
      const float* xr = &x[static_cast<size_t>(job.x_row * m.n_in)];
      for (int64_t o = 0; o < m.n_out; ++o) {
        const float* w = m.row(job.mat, o);
        double s = 0;
        for (int64_t i = 0; i < m.n_in; ++i) s += static_cast<double>(w[i]) * static_cast<double>(xr[i]);
        ref[static_cast<size_t>(j * m.n_out + o)] = s;
      }
    }
  });
  return ref;
}

// Y rows of the jobs with a matrix against the references: the tight per-row check and
// the loose whole-product check; the rows without one must hold kUntouched.
void expect_close(const std::vector<float>& y, const std::vector<RowJob>& jobs, int64_t n_out,
                  const std::vector<double>& tight, const std::vector<double>& loose) {
  double worst_row = 0, d_loose = 0, m_loose = 0;
  int64_t worst_at = -1;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const size_t at = j * static_cast<size_t>(n_out);
    if (jobs[j].mat < 0) {
      for (int64_t o = 0; o < n_out; ++o) ASSERT_EQ(y[at + o], kUntouched) << "skipped row " << j << " col " << o;
      continue;
    }
    double d = 0, m = 0;
    for (int64_t o = 0; o < n_out; ++o) {
      ASSERT_TRUE(std::isfinite(y[at + o])) << "row " << j << " col " << o;
      d = std::max(d, std::fabs(y[at + o] - tight[at + o]));
      m = std::max(m, std::fabs(tight[at + o]));
      d_loose = std::max(d_loose, std::fabs(y[at + o] - loose[at + o]));
      m_loose = std::max(m_loose, std::fabs(loose[at + o]));
    }
    const double rel = d / std::max(m, 1e-30);
    if (rel > worst_row) worst_row = rel, worst_at = static_cast<int64_t>(j);
  }
  EXPECT_LE(worst_row, kTight) << "worst row " << worst_at;
  EXPECT_LE(d_loose / std::max(m_loose, 1e-30), kLoose);
}

// ---- dense

std::vector<int64_t> dense_widths(QuantType t) {
  // K-quants: 1 and 4 super-blocks; 32-element types: 9 and 37 blocks (a last stage of 1
  // and 5 blocks: a half-stage with 1 block, one with none).
  return is_k_quant(t) ? std::vector<int64_t>{256, 1024} : std::vector<int64_t>{288, 1184};
}

void check_dense(const HostMatrix& m, int64_t mat, int n_tokens, std::mt19937& rng) {
  SCOPED_TRACE(std::string(type_name(m.type)) + " n_in " + std::to_string(m.n_in) + " n_out " +
               std::to_string(m.n_out) + " T " + std::to_string(n_tokens));
  const DeviceCopy d = upload(m);
  const std::vector<float> x = random_rows(n_tokens, m.n_in, rng);
  std::vector<RowJob> jobs;
  for (int t = 0; t < n_tokens; ++t) jobs.push_back({mat, t});
  const std::vector<double> tight = reference(m, kernel_x(m.type, x, m.n_in), jobs);
  const std::vector<double> loose = reference(m, x, jobs);
  // One guard row past the product: must keep the sentinel.
  const size_t n_y = static_cast<size_t>((n_tokens + 1) * m.n_out);
  const DeviceBuffer xd = to_device(x), yd = to_device(std::vector<float>(n_y, kUntouched));
  Workspace ws(mmq_workspace_bytes(d.w, n_tokens, 1));
  mmq(d.w, mat, xd.as<float>(), n_tokens, yd.as<float>(), ws, nullptr);
  MT_CUDA_CHECK(cudaGetLastError());
  std::vector<float> y = to_host<float>(yd, n_y);
  for (size_t i = static_cast<size_t>(n_tokens * m.n_out); i < n_y; ++i) ASSERT_EQ(y[i], kUntouched) << "guard " << i;
  y.resize(static_cast<size_t>(n_tokens * m.n_out));
  expect_close(y, jobs, m.n_out, tight, loose);
}

TEST(Mmq, SupportsTheListedTypes) {
  for (QuantType t : kTypes) EXPECT_TRUE(mmq_supports(t)) << type_name(t);
  for (QuantType t : {QuantType::F32, QuantType::F16, QuantType::BF16, QuantType::Q4_1, QuantType::Q2_K,
                      QuantType::IQ4_XS, QuantType::IQ2_XXS}) {
    EXPECT_FALSE(mmq_supports(t)) << type_name(t);
    EXPECT_EQ(mmq_workspace_bytes(DeviceMatrix{t, nullptr, 256, 64, 1, 0, 0}, 64, 1), 0u);
  }
  // The shapes dispatch may hand to mmq: activation rows and the route's limits.
  const DeviceMatrix experts{QuantType::Q4_K, nullptr, 2048, 768, 128, 1152, 1152 * 768};
  EXPECT_TRUE(mmq_fits(experts, 4096));
  EXPECT_FALSE(mmq_fits(experts, 70000));
  EXPECT_TRUE(mmq_experts_fits(experts, 4096, 8));
  EXPECT_FALSE(mmq_experts_fits(experts, 9000, 8));  // 72000 slots
  DeviceMatrix many = experts;
  many.n_mat = 9000;
  EXPECT_FALSE(mmq_experts_fits(many, 16, 8));
}

TEST(Mmq, DenseMatchesTheQuantizedReference) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(41);
  for (QuantType type : kTypes) {
    for (int64_t n_in : dense_widths(type)) {
      const HostMatrix m = make_matrix(type, n_in, 200, 2, false, rng);  // 200: a partial 128-row tile
      for (int n_tokens : {9, 33, 100, 512}) check_dense(m, 1, n_tokens, rng);
    }
  }
}

TEST(Mmq, DenseOnRandomBlockBytes) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(42);
  for (QuantType type : kTypes) {
    const HostMatrix m = make_matrix(type, dense_widths(type)[1], 136, 1, true, rng);
    for (int n_tokens : {17, 64}) check_dense(m, 0, n_tokens, rng);
  }
}

// ---- routed

// Slot s = t * K + k of token t: k = 0 -> expert 0 (a slot in every token), the others
// distinct random experts from 2 .. n_expert - 1 (expert 1 never has a slot); every
// slot with s % 7 == 3 skipped (-1).
std::vector<int32_t> make_ids(int n_tokens, int K, int n_expert, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens * K));
  std::vector<int32_t> others;
  for (int e = 2; e < n_expert; ++e) others.push_back(e);
  for (int t = 0; t < n_tokens; ++t) {
    std::shuffle(others.begin(), others.end(), rng);
    ids[static_cast<size_t>(t * K)] = 0;
    for (int k = 1; k < K; ++k) ids[static_cast<size_t>(t * K + k)] = others[static_cast<size_t>(k - 1)];
  }
  for (size_t s = 3; s < ids.size(); s += 7) ids[s] = -1;
  return ids;
}

struct RoutedCase {
  int n_tokens, K;
  bool x_per_slot;
};

// The routed product for each tile width in `widths` (0: mmq_experts' own choice)
// against the per-slot references.
void check_experts(const HostMatrix& m, const RoutedCase& c, const std::vector<int>& widths, std::mt19937& rng) {
  SCOPED_TRACE(std::string(type_name(m.type)) + " n_in " + std::to_string(m.n_in) + " n_out " +
               std::to_string(m.n_out) + " T " + std::to_string(c.n_tokens) + (c.x_per_slot ? " per-slot" : ""));
  const DeviceCopy d = upload(m);
  const int n_slots = c.n_tokens * c.K;
  const std::vector<int32_t> ids = make_ids(c.n_tokens, c.K, static_cast<int>(m.n_mat), rng);
  const std::vector<float> x = random_rows(c.x_per_slot ? n_slots : c.n_tokens, m.n_in, rng);
  std::vector<RowJob> jobs;
  for (int s = 0; s < n_slots; ++s) jobs.push_back({ids[static_cast<size_t>(s)], c.x_per_slot ? s : s / c.K});
  const std::vector<double> tight = reference(m, kernel_x(m.type, x, m.n_in), jobs);
  const std::vector<double> loose = reference(m, x, jobs);
  const DeviceBuffer xd = to_device(x), idd = to_device(ids);
  const size_t n_y = static_cast<size_t>(n_slots * m.n_out);
  Workspace ws(mmq_workspace_bytes(d.w, c.n_tokens, c.K));
  for (int width : widths) {
    SCOPED_TRACE("tile width " + std::to_string(width));
    const DeviceBuffer yd = to_device(std::vector<float>(n_y, kUntouched));
    ws.reset();
    mmq_experts_tiled(d.w, {idd.as<int32_t>(), c.n_tokens, c.K, c.x_per_slot}, xd.as<float>(), yd.as<float>(), ws,
                      nullptr, width);
    MT_CUDA_CHECK(cudaGetLastError());
    expect_close(to_host<float>(yd, n_y), jobs, m.n_out, tight, loose);
  }
}

TEST(Mmq, ExpertsMatchThePerSlotReference) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(43);
  for (QuantType type : kTypes) {
    // K-quants: 2 super-blocks; 32-element types: 13 blocks (a last stage of 5).
    const int64_t n_in = is_k_quant(type) ? 512 : 416;
    const HostMatrix m = make_matrix(type, n_in, 200, 128, false, rng);
    for (int n_tokens : {9, 33, 100, 512}) {
      for (bool per_slot : {false, true}) check_experts(m, {n_tokens, 8, per_slot}, {0, 16, 32, 64}, rng);
    }
  }
}

TEST(Mmq, ExpertsOnRandomBlockBytes) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(44);
  for (QuantType type : kTypes) {
    const HostMatrix m = make_matrix(type, 256, 72, 16, true, rng);
    check_experts(m, {40, 4, true}, {0, 16, 64}, rng);
  }
}

TEST(Mmq, ExpertsAtTheQwen3MoeShapes) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(45);
  // gate/up 128 x (2048 -> 768), X per token; down 128 x (768 -> 2048), X per slot.
  const HostMatrix up = make_matrix(QuantType::Q4_K, 2048, 768, 128, false, rng);
  check_experts(up, {48, 8, false}, {0}, rng);
  const HostMatrix down = make_matrix(QuantType::Q6_K, 768, 2048, 128, false, rng);
  check_experts(down, {48, 8, true}, {0}, rng);
}

TEST(Mmq, ExpertsWithEverySlotSkippedWriteNothing) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(46);
  const HostMatrix m = make_matrix(QuantType::Q8_0, 256, 64, 8, false, rng);
  const DeviceCopy d = upload(m);
  const int n_tokens = 20, K = 2;
  const std::vector<float> x = random_rows(n_tokens, m.n_in, rng);
  const DeviceBuffer xd = to_device(x), idd = to_device(std::vector<int32_t>(n_tokens * K, -1));
  const size_t n_y = static_cast<size_t>(n_tokens * K * m.n_out);
  const DeviceBuffer yd = to_device(std::vector<float>(n_y, kUntouched));
  Workspace ws(mmq_workspace_bytes(d.w, n_tokens, K));
  mmq_experts(d.w, {idd.as<int32_t>(), n_tokens, K, false}, xd.as<float>(), yd.as<float>(), ws, nullptr);
  const std::vector<float> y = to_host<float>(yd, n_y);
  for (size_t i = 0; i < n_y; ++i) ASSERT_EQ(y[i], kUntouched) << i;
}

// The route kernel alone at the largest size the brief names: 4096 tokens x top-8 over
// 512 experts, holes, one expert with 4096 slots.
TEST(Mmq, RouteSortsTheSlotsAndTilesEveryExpert) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(47);
  const int n_tokens = 4096, K = 8, n_expert = 512, n_slots = n_tokens * K;
  std::vector<int32_t> ids = make_ids(n_tokens, K, n_expert, rng);
  const DeviceBuffer idd = to_device(ids);
  for (int bn : {16, 32, 64}) {
    SCOPED_TRACE("bn " + std::to_string(bn));
    const int max_tiles = (n_slots + bn - 1) / bn + n_expert;
    DeviceBuffer perm(static_cast<size_t>(n_slots) * sizeof(int32_t)), tiles(max_tiles * sizeof(MmqTile)),
        count(sizeof(int32_t));
    launch_mmq_route(idd.as<int32_t>(), n_slots, n_expert, bn, perm.as<int32_t>(), tiles.as<MmqTile>(),
                     count.as<int32_t>(), nullptr);
    MT_CUDA_CHECK(cudaGetLastError());
    const int n_tiles = to_host<int32_t>(count, 1)[0];
    const std::vector<int32_t> p = to_host<int32_t>(perm, n_slots);
    const std::vector<MmqTile> t = to_host<MmqTile>(tiles, static_cast<size_t>(max_tiles));
    // Expected: per expert its slot count; sorted positions expert-major, experts ascending.
    std::vector<int> per(n_expert, 0);
    int n_sorted = 0;
    for (int32_t e : ids) {
      if (e >= 0) ++per[static_cast<size_t>(e)], ++n_sorted;
    }
    ASSERT_EQ(per[1], 0);
    std::vector<int> first(n_expert, 0);
    for (int e = 1; e < n_expert; ++e) first[e] = first[e - 1] + per[e - 1];
    int want_tiles = 0;
    for (int e = 0; e < n_expert; ++e) want_tiles += (per[e] + bn - 1) / bn;
    ASSERT_EQ(n_tiles, want_tiles);
    // The permutation: every routed slot once, grouped by expert at the expected range.
    std::vector<int> seen(n_slots, 0);
    for (int e = 0; e < n_expert; ++e) {
      for (int i = first[e]; i < first[e] + per[e]; ++i) {
        const int s = p[static_cast<size_t>(i)];
        ASSERT_TRUE(s >= 0 && s < n_slots) << "position " << i;
        ASSERT_EQ(ids[static_cast<size_t>(s)], e) << "position " << i;
        ASSERT_EQ(seen[static_cast<size_t>(s)]++, 0) << "slot " << s << " twice";
      }
    }
    // The tiles: experts ascending, each expert's range cut into bn-slot pieces in order.
    int at = 0;
    for (int e = 0; e < n_expert; ++e) {
      for (int j = 0; j * bn < per[e]; ++j, ++at) {
        const MmqTile& tile = t[static_cast<size_t>(at)];
        ASSERT_EQ(tile.expert, e) << "tile " << at;
        ASSERT_EQ(tile.first, first[e] + j * bn) << "tile " << at;
        ASSERT_EQ(tile.count, std::min(bn, per[e] - j * bn)) << "tile " << at;
      }
    }
    EXPECT_EQ(n_sorted, first[n_expert - 1] + per[n_expert - 1]);
  }
}

// Captured in a CUDA graph (a host sync inside would fail the capture), replayed twice:
// bit-identical to a direct call.
TEST(Mmq, RoutedProductReplaysFromACudaGraph) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(48);
  const HostMatrix m = make_matrix(QuantType::Q4_K, 512, 256, 32, false, rng);
  const DeviceCopy d = upload(m);
  const int n_tokens = 96, K = 4, n_slots = n_tokens * K;
  const std::vector<int32_t> ids = make_ids(n_tokens, K, 32, rng);
  const std::vector<float> x = random_rows(n_tokens, m.n_in, rng);
  const DeviceBuffer xd = to_device(x), idd = to_device(ids);
  const size_t n_y = static_cast<size_t>(n_slots * m.n_out);
  const DeviceBuffer y_direct = to_device(std::vector<float>(n_y, kUntouched));
  const DeviceBuffer y_graph = to_device(std::vector<float>(n_y, kUntouched));
  Workspace ws(mmq_workspace_bytes(d.w, n_tokens, K));
  cudaStream_t stream = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  mmq_experts(d.w, {idd.as<int32_t>(), n_tokens, K, false}, xd.as<float>(), y_direct.as<float>(), ws, stream);
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  ws.reset();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  mmq_experts(d.w, {idd.as<int32_t>(), n_tokens, K, false}, xd.as<float>(), y_graph.as<float>(), ws, stream);
  MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> a = to_host<float>(y_direct, n_y), b = to_host<float>(y_graph, n_y);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n_y * sizeof(float)), 0);
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  MT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// ---- dispatch

TEST(MmqDispatch, UnknownArchitecturesHaveNoDenseMmqLimit) {
  EXPECT_EQ(dense_mmq_max_tokens(1, QuantType::Q4_K), kNoLimit);
}

// Just above the mmvq limit matmul()/matmul_experts() must take mmq for these types:
// only mmq meets the tight reference (gemm rounds X and W to F16).
TEST(MmqDispatch, MatmulTakesMmqAboveTheMmvqLimit) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(49);
  const int sm = current_sm();
  for (QuantType type : {QuantType::Q4_K, QuantType::Q6_K, QuantType::Q8_0}) {
    SCOPED_TRACE(type_name(type));
    const int n_dense = mmvq_max_tokens(sm, type, false) + 1;
    if (n_dense <= dense_mmq_max_tokens(sm, type)) {
      const HostMatrix m = make_matrix(type, 512, 160, 1, false, rng);
      const DeviceCopy d = upload(m);
      const std::vector<float> x = random_rows(n_dense, m.n_in, rng);
      std::vector<RowJob> jobs;
      for (int t = 0; t < n_dense; ++t) jobs.push_back({0, t});
      const std::vector<double> tight = reference(m, kernel_x(type, x, m.n_in), jobs), loose = reference(m, x, jobs);
      const DeviceBuffer xd = to_device(x);
      const DeviceBuffer yd = to_device(std::vector<float>(static_cast<size_t>(n_dense * m.n_out), kUntouched));
      Workspace ws(matmul_workspace_bytes(d.w, n_dense, 1));
      matmul(d.w, 0, xd.as<float>(), n_dense, yd.as<float>(), ws, nullptr);
      expect_close(to_host<float>(yd, static_cast<size_t>(n_dense * m.n_out)), jobs, m.n_out, tight, loose);
    }
    const int n_routed = mmvq_max_tokens(sm, type, true) + 1, K = 4;
    const HostMatrix m = make_matrix(type, 256, 96, 16, false, rng);
    const DeviceCopy d = upload(m);
    const std::vector<int32_t> ids = make_ids(n_routed, K, 16, rng);
    const std::vector<float> x = random_rows(n_routed, m.n_in, rng);
    std::vector<RowJob> jobs;
    for (int s = 0; s < n_routed * K; ++s) jobs.push_back({ids[static_cast<size_t>(s)], s / K});
    const std::vector<double> tight = reference(m, kernel_x(type, x, m.n_in), jobs), loose = reference(m, x, jobs);
    const DeviceBuffer xd = to_device(x), idd = to_device(ids);
    const size_t n_y = static_cast<size_t>(n_routed * K * m.n_out);
    const DeviceBuffer yd = to_device(std::vector<float>(n_y, kUntouched));
    Workspace ws(matmul_workspace_bytes(d.w, n_routed, K));
    matmul_experts(d.w, {idd.as<int32_t>(), n_routed, K, false}, xd.as<float>(), yd.as<float>(), ws, nullptr);
    expect_close(to_host<float>(yd, n_y), jobs, m.n_out, tight, loose);
  }
}

}  // namespace
}  // namespace mt::cuda
