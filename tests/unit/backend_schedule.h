// The schedule of the backend's three-sequences test, shared by the CPU test
// (tests/unit/backend_test.cpp) and its CUDA twin (tests/cuda/backend_test.cpp): prompts of
// 5, 9 and 2 tokens in one call; then sequence 2's 4-token prompt chunk (rows 1 and 3
// asked) between the other two's decode tokens; then one decode token each, the runs in
// another order. Run together (each call one eval) or alone (each piece its own eval),
// the asked rows per sequence must agree.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "backend/backend.h"

namespace mt::test {

// max_i |got - ref| / max_i |ref| of one row of V logits.
inline double rel(const float* got, const float* ref, uint32_t V) {
  float scale = 0.f, diff = 0.f;
  for (uint32_t i = 0; i < V; ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    diff = std::max(diff, std::fabs(got[i] - ref[i]));
  }
  return static_cast<double>(diff / scale);
}

inline std::vector<int32_t> ids(uint32_t n, uint32_t salt, uint32_t V) {
  std::vector<int32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 37 + salt * 101 + 5) % V);
  return v;
}

// One sequence's piece of a call: its tokens and which of them return logits.
struct Piece {
  size_t seq;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> want;
};

// The three calls of the schedule above.
inline std::vector<std::vector<Piece>> schedule(uint32_t V) {
  auto all = [](size_t n) { return std::vector<uint8_t>(n, 1); };
  std::vector<std::vector<Piece>> calls(3);
  calls[0] = {{0, ids(5, 1, V), all(5)}, {1, ids(9, 2, V), all(9)}, {2, ids(2, 3, V), all(2)}};
  calls[1] = {{0, ids(1, 4, V), all(1)}, {2, ids(4, 5, V), {0, 1, 0, 1}}, {1, ids(1, 6, V), all(1)}};
  calls[2] = {{2, ids(1, 7, V), all(1)}, {0, ids(1, 8, V), all(1)}, {1, ids(1, 9, V), all(1)}};
  return calls;
}

inline void add_piece(Batch& b, SeqId id, uint32_t pos0, const Piece& p) {
  for (size_t i = 0; i < p.tokens.size(); ++i) b.add(id, pos0 + static_cast<uint32_t>(i), p.tokens[i], p.want[i] != 0);
}

// Every asked row's logits per sequence, in order: all pieces of a call in one eval
// (together) or each piece in its own eval.
inline std::map<size_t, std::vector<std::vector<float>>> run_schedule(Backend& backend, bool together) {
  const uint32_t V = backend.n_vocab();
  std::vector<SeqId> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(*backend.create_sequence(32));
  std::map<size_t, std::vector<std::vector<float>>> rows;
  for (const std::vector<Piece>& call : schedule(V)) {
    std::vector<std::vector<const Piece*>> evals;
    if (together) evals.emplace_back();
    for (const Piece& p : call) {
      if (!together) evals.emplace_back();
      evals.back().push_back(&p);
    }
    for (const auto& pieces : evals) {
      Batch b;
      for (const Piece* p : pieces) add_piece(b, seqs[p->seq], backend.position(seqs[p->seq]), *p);
      std::vector<float> out;
      const Status s = backend.eval(b, &out);
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(out.size(), static_cast<size_t>(b.n_logits()) * V);
      size_t r = 0;
      for (const Piece* p : pieces) {
        for (uint8_t w : p->want) {
          if (w == 0) continue;
          rows[p->seq].emplace_back(out.begin() + static_cast<std::ptrdiff_t>(r * V),
                                    out.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
          ++r;
        }
      }
    }
  }
  EXPECT_EQ(backend.position(seqs[0]), 7u);
  EXPECT_EQ(backend.position(seqs[1]), 11u);
  EXPECT_EQ(backend.position(seqs[2]), 7u);
  for (SeqId s : seqs) backend.free_sequence(s);
  return rows;
}

}  // namespace mt::test
