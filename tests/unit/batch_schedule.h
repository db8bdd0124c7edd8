// The eight-sequences schedule of the batch tests, shared by the CPU test
// (tests/unit/batch_test.cpp) and its CUDA twin (tests/cuda/batch_test.cpp): sequence s has
// a prompt of 2 + 3 s tokens and then kDecode fixed decode tokens (no sampling, so both
// runs feed the same ids). Alone: each sequence its own feeds (the prompt, then each decode
// token). Together: the first half's prompts in one call; then at every step each started
// sequence's next decode token, the second half's prompts joining at step 2, so prompt
// chunks and decode tokens share calls. Each asked row, per sequence, must agree.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "backend/backend.h"
#include "backend_schedule.h"

namespace mt::test {

inline constexpr size_t kSeqs = 8;
inline constexpr int kDecode = 6;  // decode steps after each prompt

// Sequence s: a prompt of 2 + 3 s tokens, then kDecode fixed tokens (no sampling: both
// runs feed the same ids).
inline std::vector<int32_t> prompt_of(size_t s, uint32_t V) { return mt::test::ids(static_cast<uint32_t>(2 + 3 * s), 11 + s, V); }
inline int32_t decode_token(size_t s, int k, uint32_t V) { return static_cast<int32_t>((s * 131 + static_cast<size_t>(k) * 17 + 3) % V); }

using Rows = std::map<size_t, std::vector<std::vector<float>>>;  // per sequence: its asked rows in order

// Alone: each sequence its own feeds (the prompt, then each decode token; CUDA: graph replays).
inline Rows run_alone(Backend& backend) {
  const uint32_t V = backend.n_vocab();
  Rows out;
  for (size_t s = 0; s < kSeqs; ++s) {
    auto seq = Sequence::create(backend, 64);
    EXPECT_TRUE(seq.ok());
    std::vector<float> lg;
    EXPECT_TRUE(seq->feed(prompt_of(s, V), false, &lg).ok());
    out[s].push_back(lg);
    for (int k = 0; k < kDecode; ++k) {
      const int32_t t = decode_token(s, k, V);
      EXPECT_TRUE(seq->feed({&t, 1}, false, &lg).ok());
      out[s].push_back(lg);
    }
  }
  return out;
}

// Together: the first half's prompts in one call; then every step each started
// sequence's next decode token, the second half's prompts joining at step 2.
inline Rows run_together(Backend& backend) {
  const uint32_t V = backend.n_vocab();
  std::vector<SeqId> ids(kSeqs);
  std::vector<int> done(kSeqs, -1);  // decode tokens fed; -1: prompt not yet
  for (size_t s = 0; s < kSeqs; ++s) {
    auto id = backend.create_sequence(64);
    EXPECT_TRUE(id.ok());
    ids[s] = *id;
  }
  Rows out;
  auto add_prompt = [&](Batch& b, size_t s, std::vector<size_t>& order) {
    const std::vector<int32_t> p = prompt_of(s, V);
    for (size_t i = 0; i < p.size(); ++i) b.add(ids[s], static_cast<uint32_t>(i), p[i], i + 1 == p.size());
    order.push_back(s);
  };
  for (int step = 0; step <= kDecode + 2; ++step) {
    Batch b;
    std::vector<size_t> order;  // the sequences whose rows the call returns, in batch order
    for (size_t s = 0; s < kSeqs; ++s) {
      if (done[s] >= 0 && done[s] < kDecode) {
        const auto pos = static_cast<uint32_t>(prompt_of(s, V).size()) + static_cast<uint32_t>(done[s]);
        b.add(ids[s], pos, decode_token(s, done[s], V), true);
        order.push_back(s);
      }
    }
    if (step == 0) for (size_t s = 0; s < kSeqs / 2; ++s) add_prompt(b, s, order);
    if (step == 2) for (size_t s = kSeqs / 2; s < kSeqs; ++s) add_prompt(b, s, order);
    if (b.empty()) break;
    std::vector<float> lg;
    const Status st = backend.eval(b, &lg);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return out;
    EXPECT_EQ(lg.size(), order.size() * V);
    for (size_t i = 0; i < order.size(); ++i) {
      out[order[i]].emplace_back(lg.begin() + static_cast<std::ptrdiff_t>(i * V),
                                 lg.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
      ++done[order[i]];
    }
  }
  return out;
}

inline void expect_same(const Rows& together, const Rows& alone, uint32_t V, double bound) {
  for (size_t s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(together.at(s).size(), alone.at(s).size()) << "sequence " << s;
    for (size_t r = 0; r < alone.at(s).size(); ++r) {
      EXPECT_LE(mt::test::rel(together.at(s)[r].data(), alone.at(s)[r].data(), V), bound) << "sequence " << s << " row " << r;
    }
  }
}


}  // namespace mt::test
