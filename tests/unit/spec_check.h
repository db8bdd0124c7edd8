// Speculative decoding against plain decoding on one Backend, shared by the CPU test
// (tests/unit/speculative_test.cpp) and its CUDA twin (tests/cuda/speculative_test.cpp):
// plain greedy decoding with each step's top-2 gap, speculative decoding checking after
// every step that the sequence holds the history but its pending token, and the parity
// rule (equal up to the first difference, which must sit at a near tie).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"

namespace mt::test::spec {

inline SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0;
  p.seed = 1;
  return p;
}

// Plain greedy decoding, with each step's top-2 gap relative to the row's largest |logit|.
struct Plain {
  std::vector<int32_t> tokens;
  std::vector<double> gap;
};

inline Plain plain_greedy(Backend& backend, const std::vector<int32_t>& prompt, int n) {
  Plain out;
  auto seq = Sequence::create(backend, 512);
  EXPECT_TRUE(seq.ok());
  std::vector<float> logits;
  EXPECT_TRUE(seq->feed(prompt, false, &logits).ok());
  Sampler sampler(greedy_params(), backend.n_vocab());
  for (int32_t t : prompt) sampler.accept(t);
  for (int i = 0; i < n; ++i) {
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    double scale = 1e-30;
    for (float v : logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    out.gap.push_back((sorted[0] - sorted[1]) / scale);
    const int32_t next = sampler.sample(logits);
    sampler.accept(next);
    out.tokens.push_back(next);
    EXPECT_TRUE(seq->feed({&next, 1}, false, &logits).ok());
  }
  return out;
}

// Speculative decoding of n tokens; checks after every step that the sequence holds the
// history but its pending token.
inline std::vector<int32_t> spec_decode(Backend& backend, Drafter& drafter, SpecConfig config, const std::vector<int32_t>& prompt,
                                 int n, const SamplingParams& params, SpecStats* stats = nullptr) {
  auto seq = Sequence::create(backend, 512);
  EXPECT_TRUE(seq.ok());
  const Status prepared = drafter.prepare_target(backend, seq->id());
  EXPECT_TRUE(prepared.ok()) << prepared.to_string();
  std::vector<float> logits;
  EXPECT_TRUE(seq->feed(prompt, false, &logits).ok());
  Sampler sampler(params, backend.n_vocab());
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<int32_t> history = prompt;
  history.push_back(sampler.sample(logits));
  sampler.accept(history.back());
  SpeculativeDecoder decoder(backend, seq->id(), drafter, config);
  while (history.size() < prompt.size() + static_cast<size_t>(n)) {
    const int left = static_cast<int>(prompt.size()) + n - static_cast<int>(history.size());
    const size_t before = history.size();
    const Status s = decoder.step(&history, sampler, left);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) break;
    EXPECT_GE(history.size(), before + 1);
    EXPECT_LE(history.size(), before + static_cast<size_t>(left));
    EXPECT_EQ(backend.position(seq->id()), history.size() - 1) << "the rejected guesses' rows must be gone";
  }
  if (stats != nullptr) *stats = decoder.stats();
  return {history.begin() + static_cast<ptrdiff_t>(prompt.size()), history.end()};
}

// The labelled mode's script: the prompt, then `tokens` (plain decoding's continuation).
inline std::vector<int32_t> script_of(const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> script = prompt;
  script.insert(script.end(), tokens.begin(), tokens.end());
  return script;
}

// The speculative tokens equal the plain ones up to the first difference, which must sit
// at a near tie of the plain logits (gap under tie). Returns whether they differ.
inline bool expect_greedy_parity(const Plain& plain, const std::vector<int32_t>& spec, double tie, const std::string& what) {
  EXPECT_EQ(spec.size(), plain.tokens.size()) << what;
  for (size_t i = 0; i < std::min(spec.size(), plain.tokens.size()); ++i) {
    if (spec[i] == plain.tokens[i]) continue;
    EXPECT_LT(plain.gap[i], tie) << what << ": token " << i << " is " << spec[i] << ", plain decoding's " << plain.tokens[i]
                                 << " at a top-2 gap of " << plain.gap[i];
    return true;
  }
  return false;
}

}  // namespace mt::test::spec
