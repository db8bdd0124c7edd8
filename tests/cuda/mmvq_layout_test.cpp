// The MMVQ layout switches. MOETIER_CUDA_MMVQ_WIDE16 (the default): short rows (fewer
// than 16 tasks) with a lane per task give the narrow lanes' sums in another order (a
// narrow lane accumulates two tasks one after the other; measured on the H200: bytes
// differ for Q6_K, Q3_K, IQ4_XS at 768 inputs).
// MOETIER_CUDA_MMVQ_SPLIT: long rows over several warps, likewise up to the order of sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/kernels/mmvq.h"
#include "cuda_test_util.h"
#include "mmvq_test_util.h"

namespace mt::cuda {
namespace {

using test::DeviceCopy;
using test::HostMatrix;
using test::make_matrix;
using test::random_rows;
using test::to_device;
using test::to_host;
using test::upload;

// max |a - b| / max |a|: the same sums in another float order stay within a few ulps of
// the outputs' scale.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return a.size() == b.size() ? diff / scale : 1.0;
}

// Row `row` of matrix `mat` of m (its dequantized weights) dotted with x in double: the
// loose reference that shows a product is not one of zeros.
double reference_dot(const HostMatrix& m, int64_t mat, int64_t row, const std::vector<float>& x) {
  const float* w = &m.rows[static_cast<size_t>((mat * m.n_out + row) * m.n_in)];
  double ref = 0;
  for (int64_t i = 0; i < m.n_in; ++i) ref += static_cast<double>(w[i]) * x[static_cast<size_t>(i)];
  return ref;
}

// One token's products of matrix 1 of c with a switch off and on: [on][dense, routed]
// outputs (routed: slots 3, 0, -1, 2, K = 4, rows of x per token or per slot; the skipped
// slot keeps its fill of 5).
struct SwitchedOutputs {
  std::vector<float> out[2][2];
};
SwitchedOutputs run_switched(const DeviceCopy& c, const std::vector<float>& x, bool per_slot, void (*set)(bool)) {
  const int K = 4;
  const int64_t n_out = c.w.n_out;
  const DeviceBuffer dx = to_device(x);
  Workspace ws(mmvq_workspace_bytes(c.w, 1, K));
  const std::vector<int32_t> ids = {3, 0, -1, 2};
  const DeviceBuffer dids = to_device(ids);
  SwitchedOutputs r;
  for (int on = 0; on < 2; ++on) {
    set(on == 1);
    DeviceBuffer y(n_out * sizeof(float));
    ws.reset();  // each product's scratch reused by the next (one stream: in order)
    mmvq(c.w, 1, dx.as<float>(), 1, y.as<float>(), ws, nullptr);
    const std::vector<float> fill(static_cast<size_t>(K * n_out), 5.f);
    const DeviceBuffer yr = to_device(fill);
    ws.reset();
    mmvq_experts(c.w, {dids.as<int32_t>(), 1, K, per_slot}, dx.as<float>(), yr.as<float>(), ws, nullptr);
    MT_CUDA_CHECK(cudaGetLastError());
    r.out[on][0] = to_host<float>(y, static_cast<size_t>(n_out));
    r.out[on][1] = to_host<float>(yr, fill.size());
  }
  set(false);
  return r;
}

TEST(MmvqWide, ShortRowsEqualTheNarrowLanesUpToTheOrderOfTheirSums) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(53);
  for (QuantType type : test::kTypes) {
    if (test::is_float(type)) continue;
    for (int64_t n_in : {int64_t{256}, int64_t{512}, int64_t{768}}) {  // K-quants 4 / 8 / 12 tasks, Q4_0 8 / 16 / 24
      SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in);
      const int64_t n_out = 257;
      const HostMatrix m = make_matrix(type, n_in, n_out, 4, rng);
      const DeviceCopy c = upload(m, n_out, 0);
      const std::vector<float> x = random_rows(4, n_in, rng);
      const SwitchedOutputs r = run_switched(c, x, true, set_mmvq_wide16);
      EXPECT_LE(rel_diff(r.out[0][0], r.out[1][0]), 1e-5) << "dense";
      EXPECT_LE(rel_diff(r.out[0][1], r.out[1][1]), 1e-5) << "routed";
      EXPECT_EQ(r.out[1][1][2 * n_out], 5.f);  // the skipped slot untouched
      // Not a product of zeros: row 0 of matrix 1 against the dequantized reference, loosely.
      const double ref = reference_dot(m, 1, 0, x);
      EXPECT_NEAR(r.out[1][0][0], ref, 0.05 * std::fabs(ref) + 0.05);
    }
  }
  set_mmvq_wide16(true);  // the default back
}

// MOETIER_CUDA_MMVQ_SPLIT: one-token rows of more than 32 tasks over 2 or 4 warps give one
// warp's sums in another order (each warp's partial, then the partials added in warp order).
TEST(MmvqSplit, LongRowsOverSeveralWarpsEqualOneWarpUpToTheOrderOfTheirSums) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(59);
  for (QuantType type : test::kTypes) {
    if (test::is_float(type)) continue;
    // K-quants 32 / 64 / 80 tasks (one warp, two, four with a partial last lane), Q4_0 64 / 128 / 160
    for (int64_t n_in : {int64_t{2048}, int64_t{4096}, int64_t{5120}}) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in);
      const int64_t n_out = 133;  // the last row group has one row
      const HostMatrix m = make_matrix(type, n_in, n_out, 4, rng);
      for (size_t offset : {size_t{0}, size_t{2}}) {  // natural alignment, and the byte-safe loads
        const DeviceCopy c = upload(m, n_out, offset);
        const std::vector<float> x = random_rows(4, n_in, rng);
        for (int warps : {2, 4}) {
          auto set = warps == 2 ? +[](bool on) { set_mmvq_split(on ? 2 : 0); } : +[](bool on) { set_mmvq_split(on ? 4 : 0); };
          const SwitchedOutputs r = run_switched(c, x, true, set);
          EXPECT_LE(rel_diff(r.out[0][0], r.out[1][0]), 1e-5) << "dense, " << warps << " warps, offset " << offset;
          EXPECT_LE(rel_diff(r.out[0][1], r.out[1][1]), 1e-5) << "routed, " << warps << " warps, offset " << offset;
          EXPECT_EQ(r.out[1][1][2 * n_out], 5.f);  // the skipped slot untouched
          // Not a product of zeros: rows 0 and n_out - 1 of matrix 1 against the dequantized reference, loosely.
          for (int64_t row : {int64_t{0}, n_out - 1}) {
            const double ref = reference_dot(m, 1, row, x);
            EXPECT_NEAR(r.out[1][0][static_cast<size_t>(row)], ref, 0.05 * std::fabs(ref) + 0.05) << warps << " warps";
          }
        }
      }
    }
  }
  set_mmvq_split(4);  // the default back
}

}  // namespace
}  // namespace mt::cuda
