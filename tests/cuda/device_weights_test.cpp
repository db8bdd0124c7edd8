// The device weight layout (cuda/device_weights.h): where wv's type differs from wq's and
// wk's (a Q4_K_M file's Q6_K V layers), wq | wk are one stacked matrix (wqk) whose views
// are wq and wk, wv on its own; elsewhere wq | wk | wv stack as before. A sequence over
// that layout writes the logits of one over the unstacked layout, byte for byte (every
// decode product row is computed alike in either matrix), over a prompt and 100 steps.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/device_weights.h"
#include "cuda_test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

struct StackRestore {
  ~StackRestore() { set_stack_qk(true); }  // the default
};

TEST(CudaWeights, QkStackedWhereVHasAnotherType) {
  MT_SKIP_WITHOUT_DEVICE();
  const StackRestore restore;
  auto host = test::load_tiny(Arch::kQwen3Moe, "q4_k_m", "stackqk");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  const ModelWeights& mw = (*host)->weights();
  set_stack_qk(true);
  DeviceWeights w;
  w.upload(**host);
  int mixed = 0, same = 0;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    SCOPED_TRACE(testing::Message() << "layer " << l);
    const LayerWeights& lw = mw.layers[l];
    const DevLayer& d = w.layers[l];
    if (lw.wv.type != lw.wq.type && lw.wq.type == lw.wk.type) {
      ++mixed;
      EXPECT_EQ(d.wqkv.data, nullptr);
      ASSERT_NE(d.wqk.data, nullptr);
      EXPECT_EQ(d.wqk.n_out, d.wq.n_out + d.wk.n_out);
      EXPECT_EQ(d.wq.data, d.wqk.data);
      EXPECT_EQ(d.wk.data, d.wqk.data + d.wq.n_out * d.wq.row_bytes);
      EXPECT_EQ(d.wv.type, lw.wv.type);
    } else {
      ++same;
      EXPECT_EQ(d.wqk.data, nullptr);
      EXPECT_NE(d.wqkv.data, nullptr);
    }
  }
  EXPECT_GT(mixed, 0) << "the tiny q4_k_m model has no Q6_K V layer to stack around";
  EXPECT_GT(same, 0);

  // The logits, stacked Q | K against three products.
  set_stack_qk(false);
  auto apart = CudaModel::load(**host);
  set_stack_qk(true);
  auto stacked = CudaModel::load(**host);
  ASSERT_TRUE(apart.ok() && stacked.ok());
  auto a_seq = (*apart)->new_sequence(256);
  auto s_seq = (*stacked)->new_sequence(256);
  ASSERT_TRUE(a_seq.ok() && s_seq.ok());
  const uint32_t V = (*host)->hparams().n_vocab;
  std::vector<float> a, b;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  ASSERT_TRUE((*a_seq)->feed(prompt, true, &a, nullptr).ok());
  ASSERT_TRUE((*s_seq)->feed(prompt, true, &b, nullptr).ok());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "prompt logits differ";
  int differing = 0;
  for (int step = 0; step < 100; ++step) {
    const int32_t next = static_cast<int32_t>((step * 131 + 7) % V);
    ASSERT_TRUE((*a_seq)->feed({&next, 1}, false, &a, nullptr).ok());
    ASSERT_TRUE((*s_seq)->feed({&next, 1}, false, &b, nullptr).ok());
    differing += std::memcmp(a.data(), b.data(), V * sizeof(float)) != 0 ? 1 : 0;
  }
  EXPECT_EQ(differing, 0) << "decode steps whose logits differ";
}

}  // namespace
}  // namespace mt::cuda
