// cuda/kernels/mmvq.h on the device against host references, for every supported type
// (the activation quantizer alone: mmvq_quantize_test.cpp):
//  * cpu: every quantized type, dense and routed, against cpu/'s scalar vec_dot on the
//    activation blocks the CPU itself makes (Q4_1 / Q5_1: with s rounded as the device
//    rounds it, from the half d: cuda/kernels/mmvq_kernels.h): |d| <= 1e-5 * sum_i (|a_i| +
//    |b_i|) |x_i|, a and b the weights' scale and min parts, x the quantized
//    activations; the integer dots are the CPU's, only float summation order differs;
//  * exact: W dequantized by quant/, X as the kernel sees it (the paired activation
//    type's reference round trip for quantized weights, raw f32 for float weights; Q4_1
//    / Q5_1 with the device's half-rounded s), dot products in double: max|d| within
//    1e-4 of max(max|ref|, the largest sqrt(sum (w_i x_i)^2)), so every index or layout
//    slip shows;
//  * parity: model/linear.h matmul_reference (X rounded as the CPU rounds it) over n_out
//    512 x 8 tokens, max|d| / max|ref| within 1e-4 for quantized types (the activations
//    are the CPU's), 2e-3 for Q4_1 / Q5_1 (the reference takes m * d * sum(q) for the
//    half-rounded s), 1e-3 for F32 / F16 / BF16.
// Also: misaligned weight bases take the byte-safe loads, and the routed form (ids on
// the device, repeated experts, x_per_slot both ways, a skipped slot) equals the
// per-slot reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cuda/kernels/mmvq.h"
#include "cuda_test_util.h"
#include "mmvq_test_util.h"
#include "model/linear.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using namespace test;  // cuda_test_util.h, mmvq_test_util.h

bool has_min_s(QuantType t) { return t == QuantType::Q4_1 || t == QuantType::Q5_1; }

// The s = d * sum(q) the device uses for a Q8_1 block: from the half-rounded d
// (cuda/kernels/mmvq_kernels.h), where quant/ rounds d * sum from the f32 d.
half_bits device_s(const BlockQ8_1& b) {
  int sum = 0;
  for (int8_t v : b.qs) sum += v;
  return fp32_to_fp16(static_cast<float>(sum) * fp16_to_fp32(b.d));
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
  const QuantType act = cpu::activation_type(type);  // Q8_0, Q8_1 or Q8_K
  std::vector<uint8_t> q(cpu::activation_row_bytes(type, n));
  quantize_row(act, x, q.data(), n);
  dequantize_row(act, q.data(), k.x.data(), n);
  if (act == QuantType::Q8_1) {
    for (int64_t b = 0; b < n / 32; ++b) {
      BlockQ8_1 blk;
      std::memcpy(&blk, q.data() + b * sizeof(BlockQ8_1), sizeof(blk));
      int sum = 0;
      for (int8_t v : blk.qs) sum += v;
      k.s_excess.push_back(static_cast<double>(fp16_to_fp32(device_s(blk))) -
                           static_cast<double>(fp16_to_fp32(blk.d)) * sum);
    }
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
  if (is_float(t)) return 1e-3;
  return has_min_s(t) ? 2e-3 : 1e-4;
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

// ---- against cpu/'s scalar dot

// Byte offsets of a block's scale d and (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) min scale;
// min == d: none.
struct ScaleFields {
  size_t d, min;
};
ScaleFields scale_fields(QuantType t) {
  switch (t) {
    case QuantType::Q4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case QuantType::Q5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case QuantType::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case QuantType::Q3_K: return {offsetof(BlockQ3_K, d), offsetof(BlockQ3_K, d)};
    case QuantType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case QuantType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case QuantType::Q6_K: return {offsetof(BlockQ6_K, d), offsetof(BlockQ6_K, d)};
    case QuantType::MXFP4: return {offsetof(BlockMXFP4, e), offsetof(BlockMXFP4, e)};
    default: return {0, 0};  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
  }
}

// Every byte random, then finite block scales (MXFP4: an exponent near 1), so every
// code, packed scale and sign pattern of the format occurs.
HostMatrix raw_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, std::mt19937& rng) {
  HostMatrix m{type, n_in, n_out, n_mat, *row_bytes(type, static_cast<uint64_t>(n_in)), 0, {}, {}};
  m.matrix_bytes = m.row_bytes * static_cast<uint64_t>(n_out);
  m.bytes.resize(m.matrix_bytes * static_cast<uint64_t>(n_mat));
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 132);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
  const TypeTraits& tr = type_traits(type);
  const ScaleFields f = scale_fields(type);
  for (size_t at = 0; at < m.bytes.size(); at += tr.block_bytes) {
    if (type == QuantType::MXFP4) {
      m.bytes[at] = static_cast<uint8_t>(exponent(rng));
      continue;
    }
    const half_bits d = fp32_to_fp16(scale(rng)), mn = fp32_to_fp16(scale(rng));
    std::memcpy(&m.bytes[at + f.d], &d, sizeof(d));
    if (f.min != f.d) std::memcpy(&m.bytes[at + f.min], &mn, sizeof(mn));
  }
  m.rows.resize(static_cast<size_t>(n_mat * n_out * n_in));
  for (int64_t r = 0; r < n_mat * n_out; ++r) {
    const uint8_t* src = m.bytes.data() + static_cast<uint64_t>(r) * m.row_bytes;
    dequantize_row(type, src, &m.rows[static_cast<size_t>(r * n_in)], n_in);
  }
  return m;
}

// Activation rows: per 256-block a magnitude (zero included), some outliers.
std::vector<float> activation_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 15);
  static const float kMagnitudes[] = {1.f, 1.f, 1.f, 0.f, 1e-3f, 40.f, 1.f, 1.f};
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float mag = kMagnitudes[((r * n + i) / 256 * 7 + r) % 8];
      x[static_cast<size_t>(r * n + i)] = mag * g(rng) * (pick(rng) == 0 ? 30.f : 1.f);
    }
  }
  return x;
}

// One activation row as the CPU quantizes it (cpu/kernels.h pairing, quant/'s reference
// quantizer), Q8_1's s as the device rounds it; and its dequantized values.
struct CpuActivation {
  std::vector<uint8_t> blocks;
  std::vector<float> x;
};
CpuActivation cpu_activation(QuantType type, const float* x, int64_t n) {
  const QuantType act = cpu::activation_type(type);
  CpuActivation a{std::vector<uint8_t>(cpu::activation_row_bytes(type, n)), std::vector<float>(static_cast<size_t>(n))};
  quantize_row(act, x, a.blocks.data(), n);
  if (act == QuantType::Q8_1) {
    for (int64_t b = 0; b < n / 32; ++b) {
      BlockQ8_1 blk;
      std::memcpy(&blk, a.blocks.data() + b * sizeof(BlockQ8_1), sizeof(blk));
      blk.s = device_s(blk);
      std::memcpy(a.blocks.data() + b * sizeof(BlockQ8_1), &blk, sizeof(blk));
    }
  }
  dequantize_row(act, a.blocks.data(), a.x.data(), n);
  return a;
}

// A weight row's scale part and min part (the row dequantized with the min scale, then
// the scale, zeroed): the magnitudes the dot's float products are formed from.
struct RowParts {
  std::vector<float> scale, min;
};
RowParts row_parts(const HostMatrix& m, int64_t mat, int64_t r) {
  const size_t n = static_cast<size_t>(m.n_in);
  RowParts p{std::vector<float>(n), std::vector<float>(n, 0.f)};
  const ScaleFields f = scale_fields(m.type);
  std::vector<uint8_t> row(m.row(mat, r), m.row(mat, r) + m.row_bytes);
  if (f.min == f.d) {
    dequantize_row(m.type, row.data(), p.scale.data(), m.n_in);
    return p;
  }
  const size_t block = type_traits(m.type).block_bytes;
  std::vector<uint8_t> no_min = row, no_scale = row;
  for (size_t at = 0; at < row.size(); at += block) {
    std::memset(&no_min[at + f.min], 0, sizeof(half_bits));
    std::memset(&no_scale[at + f.d], 0, sizeof(half_bits));
  }
  dequantize_row(m.type, no_min.data(), p.scale.data(), m.n_in);
  dequantize_row(m.type, no_scale.data(), p.min.data(), m.n_in);
  return p;
}

constexpr double kCpuTol = 1e-5;

// Checks got (device) against cpu/'s scalar vec_dot of weight row (mat, r), whose
// parts are p, and `act`.
void expect_cpu_dot(const HostMatrix& m, int64_t mat, int64_t r, const RowParts& p, const CpuActivation& act,
                    float got) {
  const cpu::VecDotFn dot = cpu::kernels_for(cpu::Isa::kScalar).vec_dot[static_cast<int>(m.type)];
  ASSERT_NE(dot, nullptr);
  const float want = dot(m.n_in, m.row(mat, r), act.blocks.data());
  double magnitude = 0;
  for (size_t i = 0; i < p.scale.size(); ++i) {
    magnitude += (std::fabs(static_cast<double>(p.scale[i])) + std::fabs(static_cast<double>(p.min[i]))) *
                 std::fabs(static_cast<double>(act.x[i]));
  }
  EXPECT_LE(std::fabs(static_cast<double>(got) - want), kCpuTol * magnitude)
      << "matrix " << mat << " row " << r << ": device " << got << " cpu " << want << " magnitude " << magnitude;
}

bool is_quantized(QuantType t) { return !is_float(t); }

std::vector<int64_t> cpu_widths(QuantType t) {
  // 256 / 768: rows of 8 or 16 lanes (one token); then whole warps.
  if (type_traits(t).block_elems == 256) return {256, 768, 2048, 4352};
  return {256, 768, 2048, 2880};
}

TEST(Mmvq, EveryQuantizedTypeEqualsTheCpuScalarDot) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  const int64_t n_out = 37;  // odd: the last row group has one row
  for (QuantType type : kTypes) {
    if (!is_quantized(type)) continue;
    for (bool raw : {false, true}) {
      for (int64_t n_in : cpu_widths(type)) {
        SCOPED_TRACE(testing::Message() << type_name(type) << (raw ? " raw bytes" : " quantized") << " n_in " << n_in);
        const HostMatrix m = raw ? raw_matrix(type, n_in, n_out, 1, rng) : make_matrix(type, n_in, n_out, 1, rng);
        const DeviceCopy c = upload(m, n_out, 0);
        const std::vector<float> x = activation_rows(kMmvqMaxTokens, n_in, rng);
        std::vector<RowParts> parts;
        for (int64_t r = 0; r < n_out; ++r) parts.push_back(row_parts(m, 0, r));
        std::vector<CpuActivation> acts;
        for (int t = 0; t < kMmvqMaxTokens; ++t) {
          acts.push_back(cpu_activation(type, &x[static_cast<size_t>(t * n_in)], n_in));
        }
        for (int T : {1, 2, kMmvqMaxTokens}) {
          SCOPED_TRACE(testing::Message() << "tokens " << T);
          const std::vector<float> y = run_mmvq(c.w, 0, x, T);
          for (int t = 0; t < T; ++t) {
            for (int64_t r = 0; r < n_out; ++r) {
              expect_cpu_dot(m, 0, r, parts[r], acts[t], y[static_cast<size_t>(t * n_out + r)]);
            }
          }
        }
      }
    }
  }
}

TEST(MmvqExperts, EveryQuantizedTypeEqualsTheCpuScalarDot) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  const int64_t n_out = 21, n_mat = 4;
  const int T = 2, K = 3, slots = T * K;
  for (QuantType type : kTypes) {
    if (!is_quantized(type)) continue;
    for (int64_t n_in : {int64_t{768}, type_traits(type).block_elems == 256 ? int64_t{2048} : int64_t{2880}}) {
      const HostMatrix m = raw_matrix(type, n_in, n_out, n_mat, rng);
      const DeviceCopy c = upload(m, n_out, 0);
      for (bool x_per_slot : {false, true}) {
        SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in << " x_per_slot " << x_per_slot);
        const std::vector<int32_t> ids = {3, 0, 3, 1, 2, 1};  // repeats within and across tokens
        const int x_rows = x_per_slot ? slots : T;
        const std::vector<float> x = activation_rows(x_rows, n_in, rng);
        const DeviceBuffer dids = to_device(ids), dx = to_device(x);
        DeviceBuffer dy(static_cast<size_t>(slots * n_out) * sizeof(float));
        Workspace ws(mmvq_workspace_bytes(c.w, T, K));
        mmvq_experts(c.w, {dids.as<int32_t>(), T, K, x_per_slot}, dx.as<float>(), dy.as<float>(), ws, nullptr);
        MT_CUDA_CHECK(cudaGetLastError());
        const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(slots * n_out));
        for (int s = 0; s < slots; ++s) {
          const int xr = x_per_slot ? s : s / K;
          const CpuActivation act = cpu_activation(type, &x[static_cast<size_t>(xr * n_in)], n_in);
          for (int64_t r = 0; r < n_out; ++r) {
            expect_cpu_dot(m, ids[s], r, row_parts(m, ids[s], r), act, y[static_cast<size_t>(s * n_out + r)]);
          }
        }
      }
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
  mmvq_experts(w, {dids.as<int32_t>(), T, K, x_per_slot}, dx.as<float>(), dy.as<float>(), ws, nullptr);
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
  mmvq_experts(c.w, {dids.as<int32_t>(), 1, 3, false}, dx.as<float>(), dy.as<float>(), ws, nullptr);
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
