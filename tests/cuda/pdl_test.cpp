// Programmatic dependent launch (cuda/pdl.h) changes when a kernel starts, never what it
// computes: a sequence decoding with it (through the decode graphs, captured with the
// dependent launches) writes the same logits, byte for byte, as one without, over a
// prompt (the multi-token path) and 300 decode steps (past a graph recapture at 256),
// on the weight types whose kernels it touches (the activation quantizers of Q8_0 /
// Q8_1 / Q8_K, MMVQ with and without the routed SwiGLU prologue, the norms, attention,
// the router's top-k). A race against the kernel before (a read before pdl_wait) shows
// as a difference; the launch counter shows the attribute was set.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/pdl.h"
#include "cuda_test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

TEST(CudaPdl, DecodeWritesTheSameLogitsAsPlainLaunches) {
  MT_SKIP_WITHOUT_DEVICE();
  struct Case {
    Arch arch;
    const char* quant;
  };
  for (const Case& c : {Case{Arch::kQwen3Moe, "q4_k_m"}, Case{Arch::kQwen3Moe, "q4_0"}, Case{Arch::kQwen3Moe, "q8_0"},
                        Case{Arch::kLlama, "q4_k_m"}, Case{Arch::kQwen3Moe, "f16"}}) {
    const std::string name = std::string(arch_info(c.arch).name) + "-" + c.quant;
    SCOPED_TRACE(name);
    auto host = test::load_tiny(c.arch, c.quant, "pdl");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    const uint32_t V = (*host)->hparams().n_vocab;
    auto plain = (*gpu)->new_sequence(400);
    auto dep = (*gpu)->new_sequence(400);
    ASSERT_TRUE(plain.ok() && dep.ok());
    std::vector<float> a, b;
    const uint64_t before = pdl_dependent_launches();
    const std::vector<int32_t> prompt = {1, 5, 9, 14, 2, 7};
    set_pdl(false);
    ASSERT_TRUE((*plain)->feed(prompt, true, &a, nullptr).ok());
    set_pdl(true);
    ASSERT_TRUE((*dep)->feed(prompt, true, &b, nullptr).ok());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "prompt logits differ";
    int differing = 0;
    for (int step = 0; step < 300; ++step) {
      const int32_t next = static_cast<int32_t>((step * 193 + 11) % V);
      set_pdl(false);
      ASSERT_TRUE((*plain)->feed({&next, 1}, false, &a, nullptr).ok());
      set_pdl(true);
      ASSERT_TRUE((*dep)->feed({&next, 1}, false, &b, nullptr).ok());
      ASSERT_EQ(a.size(), V);
      ASSERT_EQ(b.size(), V);
      differing += std::memcmp(a.data(), b.data(), V * sizeof(float)) != 0 ? 1 : 0;
    }
    set_pdl(false);
    EXPECT_EQ(differing, 0) << "decode steps whose logits differ";
    const uint64_t launched = pdl_dependent_launches() - before;
    EXPECT_GT(launched, 0u) << "no launch had the attribute";
    std::printf("  %s: 300 decode steps byte-equal (%d differ), %llu dependent launches\n", name.c_str(), differing,
                static_cast<unsigned long long>(launched));
  }
}

}  // namespace
}  // namespace mt::cuda
