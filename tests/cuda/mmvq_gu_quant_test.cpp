// A decode token's routed [gate | up] product whose CTAs also write the down product's
// input (cuda/mmvq.h mmvq_experts_gu_quant, MOETIER_CUDA_GU_QUANT): its product rows, the
// SwiGLU rows and their quantization must be the bytes of the two launches it replaces
// (mmvq_experts_quantized, then swiglu_pairs_quant), for every quantized weight type, every
// activation mode of the down product, the row-group widths (8 / 16 / 32 lanes, 2 / 4
// warps: rows per CTA 32 down to 2), aligned and byte-safe loads; and it leaves its
// counters zeroed, so a second launch gives the same bytes. A sequence decoding with it
// (MOETIER_CUDA_GU_QUANT=1, through the decode graphs) writes the logits of one without,
// byte for byte, over a prompt and 300 decode steps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/mmvq.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "mmvq_test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

using namespace test;  // cuda_test_util.h, mmvq_test_util.h

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct SplitRestore {
  ~SplitRestore() { set_mmvq_split(4); }  // the default
};

TEST(MmvqGuQuant, GateUpWithItsSwigluRowsEqualsTheProductThenSwigluPairsQuant) {
  MT_SKIP_WITHOUT_DEVICE();
  const SplitRestore restore;
  std::mt19937 rng(41);
  const ActQuant modes[] = {ActQuant::kQ8_0, ActQuant::kQ8_1, ActQuant::kQ8_K};
  int launches = 0;
  for (QuantType type : kTypes) {
    if (is_float(type)) continue;
    const ActQuant in_mode = act_quant_for(type);
    for (int64_t n_in : {int64_t{768}, int64_t{2048}, int64_t{4096}}) {
      const int ff = n_in == 768 ? 768 : 256;  // n_out = 2 ff
      const HostMatrix m = make_matrix(type, n_in, 2 * ff, 5, rng);
      for (size_t offset : {size_t{0}, size_t{2}}) {
        const DeviceCopy c = upload(m, m.n_out, offset);
        const int K = 8;
        const std::vector<int32_t> ids = {4, 0, 2, 2, 1, 3, 0, 4};
        const DeviceBuffer dids = to_device(ids);
        std::vector<float> x = random_rows(1, n_in, rng);
        x[7] = 30.f;  // a large gate somewhere: silu's saturated end
        const DeviceBuffer dx = to_device(x);
        DeviceBuffer xq(static_cast<size_t>(n_in)), xm(static_cast<size_t>(n_in / 32) * sizeof(uint2));
        quantize_act(dx.as<float>(), 1, static_cast<int>(n_in), in_mode, xq.as<int8_t>(), xm.as<uint2>(), nullptr);
        for (int split : {0, 4}) {
          set_mmvq_split(split);
          for (ActQuant mode : modes) {
            SCOPED_TRACE(testing::Message() << type_name(type) << " n_in " << n_in << " offset " << offset << " split "
                                            << split << " mode " << static_cast<int>(mode));
            ASSERT_TRUE(mmvq_gu_quant_supported(c.w, K, mode));
            const size_t n_gu = static_cast<size_t>(K) * 2 * ff, n_act = static_cast<size_t>(K) * ff;
            // The two launches.
            DeviceBuffer gu1(n_gu * sizeof(float)), act1(n_act * sizeof(float)), q1(n_act),
                m1(n_act / 32 * sizeof(uint2));
            mmvq_experts_quantized(c.w, dids.as<int32_t>(), 1, K, xq.as<int8_t>(), xm.as<uint2>(), false,
                                   gu1.as<float>(), nullptr);
            swiglu_pairs_quant(gu1.as<float>(), K, ff, act1.as<float>(), mode, q1.as<int8_t>(), m1.as<uint2>(),
                               nullptr);
            // The one launch, twice (its counters must be left zeroed).
            const std::vector<uint32_t> zero(n_act / 32, 0u);
            const DeviceBuffer counters = to_device(zero);
            for (int rep = 0; rep < 2; ++rep) {
              SCOPED_TRACE(rep == 0 ? "first launch" : "second launch");
              DeviceBuffer gu2(n_gu * sizeof(float)), act2(n_act * sizeof(float)), q2(n_act),
                  m2(n_act / 32 * sizeof(uint2));
              MT_CUDA_CHECK(cudaMemset(q2.get(), 0x55, n_act));
              GuQuant g;
              g.act = act2.as<float>(), g.qs = q2.as<int8_t>(), g.meta = m2.as<uint2>(), g.mode = mode;
              g.counters = counters.as<uint32_t>();
              mmvq_experts_gu_quant(c.w, dids.as<int32_t>(), K, xq.as<int8_t>(), xm.as<uint2>(), gu2.as<float>(), g,
                                    nullptr);
              MT_CUDA_CHECK(cudaDeviceSynchronize());
              ++launches;
              EXPECT_TRUE(same_bytes(to_host<float>(gu1, n_gu), to_host<float>(gu2, n_gu)));
              EXPECT_TRUE(same_bytes(to_host<float>(act1, n_act), to_host<float>(act2, n_act)));
              EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, n_act), to_host<int8_t>(q2, n_act)));
              EXPECT_TRUE(same_bytes(to_host<uint2>(m1, n_act / 32), to_host<uint2>(m2, n_act / 32)));
              EXPECT_EQ(to_host<uint32_t>(counters, zero.size()), zero);
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(launches, 13 * 3 * 2 * 2 * 3 * 2);
}

TEST(MmvqGuQuant, UnsupportedShapesAreRefused) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(43);
  const HostMatrix m = make_matrix(QuantType::Q4_K, 256, 2 * 96, 2, rng);  // ff 96: not a whole Q8_K block
  const DeviceCopy c = upload(m, m.n_out, 0);
  EXPECT_FALSE(mmvq_gu_quant_supported(c.w, 8, ActQuant::kQ8_K));
  EXPECT_TRUE(mmvq_gu_quant_supported(c.w, 8, ActQuant::kQ8_0));  // 96 = 3 blocks of 32
  const HostMatrix f = make_matrix(QuantType::F16, 256, 512, 2, rng);
  const DeviceCopy cf = upload(f, f.n_out, 0);
  EXPECT_FALSE(mmvq_gu_quant_supported(cf.w, 8, ActQuant::kQ8_0));  // float weights read f32 rows
}

TEST(MmvqGuQuant, DecodeWritesTheSameLogitsWithIt) {
  MT_SKIP_WITHOUT_DEVICE();
  // Q8_K (q4_k_m: q6_K down), Q8_0 (q4_0), Q8_1 (q5_1) down products.
  for (const char* quant : {"q4_k_m", "q4_0", "q5_1"}) {
    SCOPED_TRACE(quant);
    auto host = test::load_tiny(Arch::kQwen3Moe, quant, "guq");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    const uint32_t V = (*host)->hparams().n_vocab;
    unsetenv("MOETIER_CUDA_GU_QUANT");
    auto plain = (*gpu)->new_sequence(400);
    setenv("MOETIER_CUDA_GU_QUANT", "1", 1);
    auto fused = (*gpu)->new_sequence(400);
    unsetenv("MOETIER_CUDA_GU_QUANT");
    ASSERT_TRUE(plain.ok() && fused.ok());
    const uint64_t before = mmvq_gu_quant_launches();
    std::vector<float> a, b;
    const std::vector<int32_t> prompt = {1, 5, 9, 14, 2, 7};
    ASSERT_TRUE((*plain)->feed(prompt, true, &a, nullptr).ok());
    ASSERT_TRUE((*fused)->feed(prompt, true, &b, nullptr).ok());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "prompt logits differ";
    int differing = 0;
    for (int step = 0; step < 300; ++step) {
      const int32_t next = static_cast<int32_t>((step * 193 + 11) % V);
      ASSERT_TRUE((*plain)->feed({&next, 1}, false, &a, nullptr).ok());
      ASSERT_TRUE((*fused)->feed({&next, 1}, false, &b, nullptr).ok());
      ASSERT_EQ(a.size(), V);
      ASSERT_EQ(b.size(), V);
      differing += std::memcmp(a.data(), b.data(), V * sizeof(float)) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differing, 0) << "decode steps whose logits differ";
    EXPECT_GT(mmvq_gu_quant_launches(), before) << "the fused product never ran";
  }
}

}  // namespace
}  // namespace mt::cuda
