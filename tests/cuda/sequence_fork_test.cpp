// CudaModel::fork_sequence and truncate_sequence (cuda/cuda_model.h): a fork continues
// exactly as the sequence it copies (the next decode steps' logits byte-equal), also past
// a decode graph's span and for a recurrent model (its states copied); a sequence
// truncated back to a position continues exactly as one that stopped there; a recurrent
// model refuses any truncation but to 0, which restarts it; bad calls are a Status.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda_test_util.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

std::vector<int32_t> tokens(uint32_t n, uint32_t V, uint32_t seed) {
  std::vector<int32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 193 + seed * 71 + 11) % V);
  return ids;
}

// Feeds `ids` one decode step at a time; the logits of every step, in order.
std::vector<float> decode(Evaluator& e, const std::vector<int32_t>& ids) {
  std::vector<float> all, step;
  for (int32_t id : ids) {
    EXPECT_TRUE(e.feed({&id, 1}, false, &step, nullptr).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaSequence, AForkContinuesAsItsSourceAndATruncatedSequenceAsOneThatStopped) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen35Moe}) {
    SCOPED_TRACE(arch_info(arch).name);
    auto host = test::load_tiny(arch, "q4_k_m", "fork");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto model = CudaModel::load(**host);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    CudaModel& m = **model;
    const uint32_t V = (*host)->hparams().n_vocab;
    const std::vector<int32_t> prompt = tokens(250, V, 1), next = tokens(20, V, 2);  // past the 256-position span
    std::vector<float> logits;

    auto a = m.new_sequence(512);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE((*a)->feed(prompt, false, &logits, nullptr).ok());
    auto b = m.new_sequence(512);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->feed(tokens(7, V, 3), false, &logits, nullptr).ok());  // overwritten by the fork
    ASSERT_TRUE(m.fork_sequence(**a, **b).ok());
    EXPECT_EQ((*b)->position(), (*a)->position());
    const std::vector<float> from_a = decode(**a, next);
    const std::vector<float> from_b = decode(**b, next);
    EXPECT_TRUE(same_bytes(from_a, from_b)) << "the fork's decode logits differ from its source's";

    // Truncation: c decodes 5 other tokens after the prompt, goes back, then takes `next`.
    auto c = m.new_sequence(512);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->feed(prompt, false, &logits, nullptr).ok());
    decode(**c, tokens(5, V, 4));
    const bool recurrent = !(*host)->hparams().recurrent.empty();
    const Status cut = m.truncate_sequence(**c, static_cast<uint32_t>(prompt.size()));
    if (!recurrent) {
      ASSERT_TRUE(cut.ok()) << cut.to_string();
      EXPECT_EQ((*c)->position(), prompt.size());
      EXPECT_TRUE(same_bytes(decode(**c, next), from_a)) << "the truncated sequence's logits differ";
    } else {
      EXPECT_FALSE(cut.ok()) << "a recurrent model cannot go back to a middle position";
      ASSERT_TRUE(m.truncate_sequence(**c, 0).ok());
      EXPECT_EQ((*c)->position(), 0u);
      ASSERT_TRUE((*c)->feed(prompt, false, &logits, nullptr).ok());
      EXPECT_TRUE(same_bytes(decode(**c, next), from_a)) << "the restarted sequence's logits differ";
    }

    // Bad calls.
    auto small = m.new_sequence(64);
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(m.fork_sequence(**a, **small).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(m.truncate_sequence(**small, 1).code(), StatusCode::kOutOfRange);
    auto q8 = m.new_sequence(512, QuantType::Q8_0);
    ASSERT_TRUE(q8.ok());
    EXPECT_EQ(m.fork_sequence(**a, **q8).code(), StatusCode::kInvalidArgument);
    auto other = CudaModel::load(**host);
    ASSERT_TRUE(other.ok());
    auto foreign = (*other)->new_sequence(512);
    ASSERT_TRUE(foreign.ok());
    EXPECT_EQ(m.fork_sequence(**foreign, **b).code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace mt::cuda
