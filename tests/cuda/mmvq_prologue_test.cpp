// The MMVQ activation prologue (cuda/mmvq.h, MOETIER_CUDA_MMVQ_PROLOGUE; off by default,
// switched on here): one token's products whose CTAs quantize x themselves (mmvq,
// mmvq_experts) or make and quantize the SwiGLU row (mmvq_experts_swiglu) must give the
// bytes of the separate launches they replace (quantize_act / swiglu_pairs_quant, then
// the product over the quantized rows), on every quantized type; a skipped slot stays
// untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/mmvq.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "mmvq_test_util.h"

namespace mt::cuda {
namespace {

using namespace test;  // cuda_test_util.h, mmvq_test_util.h

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// The prologue is off by default (measured slower); it runs a row on one warp, so the
// products it is compared with do too (MOETIER_CUDA_MMVQ_SPLIT off, its default 4 after).
struct PrologueOn {
  PrologueOn() {
    set_mmvq_prologue(true);
    set_mmvq_split(0);
  }
  ~PrologueOn() {
    set_mmvq_prologue(false);
    set_mmvq_split(4);
  }
};

TEST(MmvqPrologue, OneTokenProductsEqualTheQuantizeLaunchByteForByte) {
  MT_SKIP_WITHOUT_DEVICE();
  const PrologueOn on;
  std::mt19937 rng(31);
  for (QuantType type : kTypes) {
    if (is_float(type)) continue;
    const ActQuant mode = act_quant_for(type);
    for (int64_t n_in : {int64_t{768}, int64_t{4096}}) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in);
      const HostMatrix m = make_matrix(type, n_in, 300, 4, rng);
      const DeviceCopy c = upload(m, m.n_out, 0);
      const int K = 4;
      const std::vector<float> x = random_rows(K, n_in, rng);
      const DeviceBuffer dx = to_device(x);
      DeviceBuffer qs(static_cast<size_t>(K * n_in)), meta(static_cast<size_t>(K * n_in / 32) * sizeof(uint2));
      quantize_act(dx.as<float>(), K, static_cast<int>(n_in), mode, qs.as<int8_t>(), meta.as<uint2>(), nullptr);
      // Dense, one token.
      DeviceBuffer y1(300 * sizeof(float)), y2(300 * sizeof(float));
      Workspace ws(mmvq_workspace_bytes(c.w, 1, K));
      mmvq(c.w, 2, dx.as<float>(), 1, y1.as<float>(), ws, nullptr);
      mmvq_quantized(c.w, 2, qs.as<int8_t>(), meta.as<uint2>(), 1, y2.as<float>(), nullptr);
      MT_CUDA_CHECK(cudaGetLastError());
      EXPECT_TRUE(same_bytes(to_host<float>(y1, 300), to_host<float>(y2, 300)));
      // Routed, one token, both activation layouts; a skipped slot stays untouched.
      const std::vector<int32_t> ids = {3, 0, -1, 3};
      const DeviceBuffer dids = to_device(ids);
      for (bool per_slot : {false, true}) {
        SCOPED_TRACE(per_slot ? "per slot" : "per token");
        const std::vector<float> fill(static_cast<size_t>(K * 300), 5.f);
        const DeviceBuffer r1 = to_device(fill), r2 = to_device(fill);
        mmvq_experts(c.w, dids.as<int32_t>(), 1, K, dx.as<float>(), per_slot, r1.as<float>(), ws, nullptr);
        mmvq_experts_quantized(c.w, dids.as<int32_t>(), 1, K, qs.as<int8_t>(), meta.as<uint2>(), per_slot,
                               r2.as<float>(), nullptr);
        MT_CUDA_CHECK(cudaGetLastError());
        const std::vector<float> a = to_host<float>(r1, fill.size()), b = to_host<float>(r2, fill.size());
        EXPECT_TRUE(same_bytes(a, b));
        EXPECT_EQ(a[2 * 300], 5.f);
        EXPECT_NE(a[0], 5.f);
      }
    }
  }
}

TEST(MmvqPrologue, SwigluDownEqualsSwigluPairsQuantThenTheProduct) {
  MT_SKIP_WITHOUT_DEVICE();
  const PrologueOn on;
  std::mt19937 rng(37);
  for (QuantType type : kTypes) {
    if (is_float(type)) continue;
    const ActQuant mode = act_quant_for(type);
    for (int ff : {768, 1536}) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " ff " << ff);
      const int K = 8, n_out = 520;
      const HostMatrix m = make_matrix(type, ff, n_out, 6, rng);
      const DeviceCopy c = upload(m, m.n_out, 0);
      ASSERT_TRUE(mmvq_swiglu_supported(c.w, 1, K));
      std::vector<float> gu = random_rows(K, 2 * ff, rng);
      gu[5] = 40.f, gu[6] = -40.f;  // silu at its saturated ends
      const std::vector<int32_t> ids = {0, 5, 2, -1, 2, 1, 4, 3};
      const DeviceBuffer dgu = to_device(gu), dids = to_device(ids);
      DeviceBuffer act(static_cast<size_t>(K * ff) * sizeof(float)), qs(static_cast<size_t>(K * ff)),
          meta(static_cast<size_t>(K * ff / 32) * sizeof(uint2));
      swiglu_pairs_quant(dgu.as<float>(), K, ff, act.as<float>(), mode, qs.as<int8_t>(), meta.as<uint2>(), nullptr);
      const std::vector<float> fill(static_cast<size_t>(K * n_out), -3.f);
      const DeviceBuffer r1 = to_device(fill), r2 = to_device(fill);
      mmvq_experts_swiglu(c.w, dids.as<int32_t>(), 1, K, dgu.as<float>(), r1.as<float>(), nullptr);
      mmvq_experts_quantized(c.w, dids.as<int32_t>(), 1, K, qs.as<int8_t>(), meta.as<uint2>(), true, r2.as<float>(),
                             nullptr);
      MT_CUDA_CHECK(cudaGetLastError());
      const std::vector<float> a = to_host<float>(r1, fill.size()), b = to_host<float>(r2, fill.size());
      EXPECT_TRUE(same_bytes(a, b));
      EXPECT_EQ(a[3 * n_out], -3.f);
      EXPECT_NE(a[0], -3.f);
    }
  }
}

}  // namespace
}  // namespace mt::cuda
