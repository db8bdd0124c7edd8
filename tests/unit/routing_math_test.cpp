// The routing math variants of model/layers.h route_token, each on a hand-worked case:
// softmax vs sigmoid scores, the exp_probs_b selection bias (chooses, does not weigh),
// group-limited routing (sum of each group's best two), renormalisation and the scale,
// gpt-oss's softmax over the selected logits; and the attention sink's softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/layers.h"

namespace mt {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const MoeMath& math, std::vector<float> logits, uint32_t k, const std::vector<float>& bias = {}) {
  Routed r{std::vector<int32_t>(k), std::vector<float>(k)};
  std::vector<float> work;
  route_token(math, logits.data(), static_cast<uint32_t>(logits.size()), k, bias, r.experts.data(), r.weights.data(), work);
  return r;
}

TEST(RoutingMath, SoftmaxTopKWithAndWithoutRenormalisation) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  const float p1 = static_cast<float>(std::exp(2.0) / z), p3 = static_cast<float>(std::exp(1.5) / z);
  Routed raw = route({ExpertGating::kSoftmax, false, 1.0f, 0, 0}, logits, 2);
  EXPECT_EQ(raw.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(raw.weights[0], p1, 1e-6);
  EXPECT_NEAR(raw.weights[1], p3, 1e-6);
  Routed norm = route({ExpertGating::kSoftmax, true, 1.0f, 0, 0}, logits, 2);
  EXPECT_NEAR(norm.weights[0], p1 / (p1 + p3), 1e-6);
  EXPECT_NEAR(norm.weights[0] + norm.weights[1], 1.0f, 1e-6);
}

TEST(RoutingMath, SelectionBiasChoosesButTheWeightsAreUnbiased) {
  // sigmoid scores: expert 0 is best on its own, but the bias lifts expert 2 above it.
  const std::vector<float> logits = {1.0f, 0.5f, 0.8f, -2.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.2f, 0.0f};
  Routed no_bias = route({ExpertGating::kSigmoid, false, 1.0f, 0, 0}, logits, 1);
  EXPECT_EQ(no_bias.experts[0], 0);
  Routed biased = route({ExpertGating::kSigmoid, false, 1.0f, 0, 0}, logits, 1, bias);
  EXPECT_EQ(biased.experts[0], 2);
  EXPECT_FLOAT_EQ(biased.weights[0], sigmoid(0.8f));  // not sigmoid(0.8) + 0.2
}

TEST(RoutingMath, RenormaliseThenScale) {
  const std::vector<float> logits = {2.0f, -1.0f, 1.0f, 0.0f};
  Routed r = route({ExpertGating::kSigmoid, true, 2.5f, 0, 0}, logits, 2);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2}));
  const float a = sigmoid(2.0f), b = sigmoid(1.0f);
  EXPECT_NEAR(r.weights[0], a / (a + b) * 2.5f, 1e-6);
  EXPECT_NEAR(r.weights[1], b / (a + b) * 2.5f, 1e-6);
  // Without renormalisation the scale multiplies the raw scores.
  Routed s = route({ExpertGating::kSigmoid, false, 2.5f, 0, 0}, logits, 2);
  EXPECT_NEAR(s.weights[0], a * 2.5f, 1e-6);
}

TEST(RoutingMath, GroupsRankedBySumOfTheirBestTwo) {
  // 3 groups of 3. Group 0 holds the single best expert (0.9) but a weak second (0.1):
  // sum 1.0. Group 1: 0.6 + 0.55 = 1.15. Group 2: 0.5 + 0.45 = 0.95. With one group used
  // the top-2 come from group 1 only, although expert 0 scores highest overall.
  std::vector<float> scores = {0.9f, 0.1f, 0.0f, 0.6f, 0.55f, 0.2f, 0.5f, 0.45f, 0.3f};
  std::vector<float> logits;
  for (float s : scores) logits.push_back(std::log(s / (1.0f - s + 1e-30f) + 1e-30f));  // sigmoid^-1
  logits[2] = -30.0f;
  Routed one = route({ExpertGating::kSigmoid, false, 1.0f, 3, 1}, logits, 2);
  EXPECT_EQ(one.experts, (std::vector<int32_t>{3, 4}));
  // Two groups used: groups 1 and 0; the best two of those are experts 0 and 3.
  Routed two = route({ExpertGating::kSigmoid, false, 1.0f, 3, 2}, logits, 2);
  EXPECT_EQ(two.experts, (std::vector<int32_t>{0, 3}));
  // No groups: experts 0 and 3 as well, and with k = 3 expert 4 (0.55) before 6 (0.5).
  Routed none = route({ExpertGating::kSigmoid, false, 1.0f, 0, 0}, logits, 3);
  EXPECT_EQ(none.experts, (std::vector<int32_t>{0, 3, 4}));
  // k = 3 with groups {1, 0}: 0, 3, 4; with only group 1: 3, 4, 5.
  Routed three = route({ExpertGating::kSigmoid, false, 1.0f, 3, 1}, logits, 3);
  EXPECT_EQ(three.experts, (std::vector<int32_t>{3, 4, 5}));
}

TEST(RoutingMath, SoftmaxOfTheSelectedLogits) {
  // gpt-oss: the raw logits choose; the weights are a softmax over the k chosen only.
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.0f};
  Routed r = route({ExpertGating::kSoftmaxOfSelected, false, 1.0f, 0, 0}, logits, 2);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  const float e = std::exp(1.0f);  // exp(3 - 2)
  EXPECT_NEAR(r.weights[0], e / (e + 1.0f), 1e-6);
  EXPECT_NEAR(r.weights[1], 1.0f / (e + 1.0f), 1e-6);
}

TEST(AttentionMath, SoftmaxWithSinkLeavesTheSinkShareOut) {
  // Scores {0, ln 2} and a sink logit ln 1 = 0: exp values 1, 2 and 1 in the denominator.
  std::vector<float> s = {0.0f, std::log(2.0f)};
  softmax_with_sink(s.data(), s.size(), 0.0f);
  EXPECT_NEAR(s[0], 0.25f, 1e-6);
  EXPECT_NEAR(s[1], 0.5f, 1e-6);
  // A sink far below changes nothing; one far above takes almost everything.
  std::vector<float> low = {1.0f, 2.0f}, plain = {1.0f, 2.0f}, high = {1.0f, 2.0f};
  softmax_with_sink(low.data(), 2, -100.0f);
  softmax(plain.data(), 2);
  EXPECT_FLOAT_EQ(low[0], plain[0]);
  softmax_with_sink(high.data(), 2, 30.0f);
  EXPECT_LT(high[0] + high[1], 1e-9);
}

}  // namespace
}  // namespace mt
