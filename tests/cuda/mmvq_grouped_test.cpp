// MOETIER_CUDA_MMVQ_GROUPED: a routed product's slots grouped by expert on the device
// (cuda/kernels/mmvq_groups.cu), each matrix read once for up to 8 of its slots. Every
// slot's sums are those of its own per-slot launch where the per-slot form takes one warp
// or less per row (no split over warps): bit for bit; with the split, the same sums in
// another order. Tokens pick distinct experts out of 128 (the real routing's shape) or
// out of 6 (every expert's slots fill several groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
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

// ids (T, K): each token's K distinct experts of n_mat (any, when K > n_mat).
std::vector<int32_t> route(int T, int K, int64_t n_mat, std::mt19937& rng) {
  std::vector<int32_t> ids;
  std::vector<int32_t> all(static_cast<size_t>(n_mat));
  std::iota(all.begin(), all.end(), 0);
  for (int t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int k = 0; k < K; ++k) ids.push_back(all[static_cast<size_t>(k % n_mat)]);
  }
  return ids;
}

// Y of a routed product with grouping from `grouped_from` tokens (0: never), rows
// pre-filled with 5.
std::vector<float> run_routed(const DeviceCopy& c, const std::vector<int32_t>& ids, const std::vector<float>& x, int T,
                              int K, bool per_slot, int grouped_from) {
  const int process_setting = mmvq_grouped_from();
  set_mmvq_grouped(grouped_from);
  const int slots = T * K;
  const DeviceBuffer dids = to_device(ids), dx = to_device(x);
  const DeviceBuffer dy = to_device(std::vector<float>(static_cast<size_t>(slots * c.w.n_out), 5.f));
  Workspace ws(mmvq_workspace_bytes(c.w, T, K));
  mmvq_experts(c.w, {dids.as<int32_t>(), T, K, per_slot}, dx.as<float>(), dy.as<float>(), ws, nullptr);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y = to_host<float>(dy, static_cast<size_t>(slots * c.w.n_out));
  set_mmvq_grouped(process_setting);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return a.size() == b.size() ? diff / scale : 1.0;
}

TEST(MmvqGrouped, EverySlotEqualsItsPerSlotProduct) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(61);
  for (QuantType type : test::kTypes) {
    if (test::is_float(type)) continue;
    const TypeTraits& tr = type_traits(type);
    for (int64_t n_in : {int64_t{768}, tr.block_elems == 256 ? int64_t{2048} : int64_t{2880}}) {
      const int64_t n_out = 69;  // the last row group has one row
      for (int64_t n_mat : {int64_t{128}, int64_t{6}}) {
        const HostMatrix m = make_matrix(type, n_in, n_out, n_mat, rng);
        const DeviceCopy c = upload(m, n_out, 0);
        // One warp or less per row in the per-slot form (32-element formats: a task per block;
        // K-quants four per 256): then the grouped sums are the same bits.
        const int64_t tasks = n_in / tr.block_elems * (tr.block_elems == 256 ? 4 : 1);
        for (int T : {2, 9, 33}) {
          for (bool per_slot : {false, true}) {
            SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in << " n_mat " << n_mat << " T " << T
                                            << " per_slot " << per_slot);
            const int K = 8;
            const std::vector<int32_t> ids = route(T, K, n_mat, rng);
            const std::vector<float> x = random_rows(per_slot ? T * K : T, n_in, rng);
            const std::vector<float> one = run_routed(c, ids, x, T, K, per_slot, 0);
            const std::vector<float> grouped = run_routed(c, ids, x, T, K, per_slot, 2);
            if (tasks <= 32) {
              EXPECT_TRUE(same_bits(one, grouped)) << "rel " << rel_diff(one, grouped);
            } else {
              EXPECT_LE(rel_diff(one, grouped), 1e-5);
            }
            // Not a product of zeros: slot 0's row 0 against the dequantized weights, loosely.
            const int xr = 0;
            double ref = 0;
            const float* w = &m.rows[static_cast<size_t>(ids[0] * n_out * n_in)];
            for (int64_t i = 0; i < n_in; ++i) ref += static_cast<double>(w[i]) * x[static_cast<size_t>(xr * n_in + i)];
            EXPECT_NEAR(grouped[0], ref, 0.05 * std::fabs(ref) + 0.05);
          }
        }
      }
    }
  }
}

TEST(MmvqGrouped, SkippedAndOutOfRangeIdsInGroups) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(67);
  const int64_t n_in = 2048, n_out = 33, n_mat = 4;
  const HostMatrix m = make_matrix(QuantType::Q4_K, n_in, n_out, n_mat, rng);
  const DeviceCopy c = upload(m, n_out, 0);
  const int T = 3, K = 4;
  // -1 skips its slot; 4 and 9 are past the last matrix: NaN rows.
  const std::vector<int32_t> ids = {0, 1, -1, 4, 1, 0, 9, 2, 3, -1, 1, 0};
  const std::vector<float> x = random_rows(T, n_in, rng);
  const std::vector<float> one = run_routed(c, ids, x, T, K, false, 0);
  const std::vector<float> grouped = run_routed(c, ids, x, T, K, false, 2);
  for (int s = 0; s < T * K; ++s) {
    for (int64_t r = 0; r < n_out; ++r) {
      const float g = grouped[static_cast<size_t>(s * n_out + r)];
      if (ids[s] < 0) {
        EXPECT_EQ(g, 5.f) << "slot " << s;
      } else if (ids[s] >= n_mat) {
        EXPECT_TRUE(std::isnan(g)) << "slot " << s;
      } else {
        EXPECT_EQ(g, one[static_cast<size_t>(s * n_out + r)]) << "slot " << s << " row " << r;
      }
    }
  }
}

// 64 tokens of one expert each way: the slots of one matrix over 8 groups and more.
TEST(MmvqGrouped, ManySlotsOfOneMatrixFillSeveralGroups) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(71);
  const int64_t n_in = 768, n_out = 40, n_mat = 3;
  const HostMatrix m = make_matrix(QuantType::Q6_K, n_in, n_out, n_mat, rng);
  const DeviceCopy c = upload(m, n_out, 0);
  const int T = 64, K = 2;
  std::vector<int32_t> ids;
  for (int t = 0; t < T; ++t) ids.insert(ids.end(), {1, t % 5 == 0 ? 2 : 0});  // matrix 1: 64 slots
  const std::vector<float> x = random_rows(T * K, n_in, rng);
  EXPECT_TRUE(same_bits(run_routed(c, ids, x, T, K, true, 0), run_routed(c, ids, x, T, K, true, 2)));
}

}  // namespace
}  // namespace mt::cuda
