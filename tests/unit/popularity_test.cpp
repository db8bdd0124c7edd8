// experts/popularity.h: ranking and coverage, counting a trace, the JSON round trip and
// every validation error of untrusted profiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "experts/popularity.h"
#include "test_util.h"

namespace mt {
namespace {

PopularityProfile small_profile() {
  PopularityProfile p;
  p.model = "tiny \"q\".gguf";
  p.n_expert = 4;
  p.tokens = 5;
  p.counts = {{2, 5, 0, 3}, {}, {1, 1, 4, 4}};  // block 1 is dense
  return p;
}

TEST(Popularity, RankedAndCoverage) {
  const PopularityProfile p = small_profile();
  EXPECT_EQ(p.ranked(0), (std::vector<uint32_t>{1, 3, 0, 2}));
  EXPECT_EQ(p.ranked(2), (std::vector<uint32_t>{2, 3, 0, 1}));  // ties: lower id first
  EXPECT_TRUE(p.ranked(1).empty());
  EXPECT_TRUE(p.ranked(7).empty());
  EXPECT_DOUBLE_EQ(p.coverage(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(p.coverage(0, 1), 0.5);
  EXPECT_DOUBLE_EQ(p.coverage(0, 2), 0.8);
  EXPECT_DOUBLE_EQ(p.coverage(0, 4), 1.0);
  EXPECT_DOUBLE_EQ(p.coverage(0, 99), 1.0);
  EXPECT_DOUBLE_EQ(p.coverage(2, 2), 0.8);
  EXPECT_DOUBLE_EQ(p.coverage(1, 2), 0.0);
  EXPECT_DOUBLE_EQ(p.coverage(9, 2), 0.0);
}

TEST(Popularity, FromTraceCountsEverySelection) {
  SyntheticTraceOptions o;
  o.n_layers = 3;
  o.n_expert = 8;
  o.top_k = 2;
  o.n_tokens = 50;
  RoutingTrace t = synthetic_trace(o);
  for (RoutingEvent& e : t.events) e.layer = e.layer * 2 + 1;  // MoE blocks 1, 3, 5
  t.layers = {1, 3, 5};
  const PopularityProfile p = popularity_from_trace(t, 7, 8);
  EXPECT_EQ(p.n_expert, 8u);
  EXPECT_EQ(p.tokens, 50u);
  ASSERT_EQ(p.counts.size(), 7u);
  for (uint32_t l = 0; l < 7; ++l) {
    if (l % 2 == 0) {
      EXPECT_TRUE(p.counts[l].empty()) << l;
      continue;
    }
    ASSERT_EQ(p.counts[l].size(), 8u);
    EXPECT_EQ(std::accumulate(p.counts[l].begin(), p.counts[l].end(), uint64_t{0}), 100u) << l;
  }
  uint64_t e3_in_layer3 = 0;
  for (const RoutingEvent& e : t.events) {
    if (e.layer == 3) e3_in_layer3 += std::count(e.experts.begin(), e.experts.end(), 3);
  }
  EXPECT_EQ(p.counts[3][3], e3_in_layer3);
  // A trace naming more blocks or experts than given widens the profile.
  const PopularityProfile wide = popularity_from_trace(t, 2, 4);
  EXPECT_EQ(wide.counts.size(), 6u);
  EXPECT_EQ(wide.n_expert, t.n_expert);
}

TEST(Popularity, JsonRoundTrip) {
  const PopularityProfile p = small_profile();
  const std::string text = popularity_to_json(p);
  auto q = popularity_from_json(text);
  ASSERT_TRUE(q.ok()) << q.status().to_string() << "\n" << text;
  EXPECT_EQ(q->model, p.model);
  EXPECT_EQ(q->n_expert, p.n_expert);
  EXPECT_EQ(q->tokens, p.tokens);
  EXPECT_EQ(q->counts, p.counts);
  EXPECT_EQ(popularity_to_json(*q), text);

  const std::string path = test::temp_path("profile.json");
  std::ofstream(path) << text;
  auto r = read_popularity(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->counts, p.counts);

  PopularityProfile none;
  none.n_expert = 2;
  auto n = popularity_from_json(popularity_to_json(none));
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_TRUE(n->counts.empty());
}

TEST(Popularity, JsonValidation) {
  const std::string head = R"({"version": 1, "model": "m", "n_expert": 3, "tokens": 4, "layers": )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"version": 2, "n_expert": 3, "tokens": 4, "layers": []})", "\"version\" must be 1"},
      {R"({"version": 1, "n_expert": 0, "tokens": 4, "layers": []})", "\"n_expert\""},
      {R"({"version": 1, "n_expert": 3, "layers": []})", "\"tokens\""},
      {R"({"version": 1, "n_expert": 3, "tokens": -1, "layers": []})", "\"tokens\""},
      {R"({"version": 1, "n_expert": 3, "tokens": 4})", "\"layers\" must be an array"},
      {R"({"version": 1, "model": 7, "n_expert": 3, "tokens": 4, "layers": []})", "\"model\""},
      {head + R"([{"layer": 0}]})", "layers[0]: needs"},
      {head + R"([{"layer": 0, "counts": [1, 2]}]})", "n_expert (3)"},
      {head + R"([{"layer": 0, "counts": [1, 2, -3]}]})", "non-negative"},
      {head + R"([{"layer": 0, "counts": [1, 2, 0.5]}]})", "non-negative"},
      {head + R"([{"layer": -1, "counts": [1, 2, 3]}]})", "\"layer\" must be"},
      {head + R"([{"layer": 4000000000, "counts": [1, 2, 3]}]})", "\"layer\" must be"},
      {head + R"([{"layer": 1, "counts": [1, 2, 3]}, {"layer": 1, "counts": [0, 0, 0]}]})",
       "layers[1]: layer 1 appears twice"},
  };
  for (const auto& [text, expect] : cases) {
    auto p = popularity_from_json(text);
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(p.status().message().find(expect), std::string::npos) << p.status().message();
  }
  const std::string bad = test::temp_path("bad-profile.json");
  std::ofstream(bad) << "{";
  auto r = read_popularity(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(bad + ": popularity profile: not valid JSON"), std::string::npos);
  EXPECT_EQ(read_popularity(test::temp_path("missing.json")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mt
