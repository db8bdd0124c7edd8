// experts/routing_trace.h: the JSON-lines reader (fields, steps, every malformed line
// named by file:line) and synthetic_trace (deterministic, top-k distinct, skew and
// locality do what they say).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "experts/routing_trace.h"
#include "test_util.h"

namespace mt {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(name);
  std::ofstream(path) << text;
  return path;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

TEST(RoutingTrace, ReadsRecordedLines) {
  // A prompt batch of two positions (step 0, layer-major as the model records it), then
  // one decoded token (step 1); a blank line in between.
  const std::string path = write_file("rec.jsonl", join_lines({
      R"({"layer": 0, "pos": 0, "step": 0, "experts": [3, 1], "weights": [0.6, 0.4]})",
      R"({"layer": 0, "pos": 1, "step": 0, "experts": [2, 3], "weights": [0.5, 0.5]})",
      R"({"layer": 2, "pos": 0, "step": 0, "experts": [0, 1], "weights": [0.7, 0.3]})",
      "",
      R"({"layer": 2, "pos": 1, "step": 0, "experts": [1, 0], "weights": [0.9, 0.1]})",
      R"({"layer": 0, "pos": 2, "step": 1, "experts": [7, 3]})",
      R"({"layer": 2, "pos": 2, "step": 1, "experts": [0, 5], "weights": []})",
  }));
  auto t = read_routing_trace(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->events.size(), 6u);
  EXPECT_EQ(t->top_k, 2u);
  EXPECT_EQ(t->n_expert, 8u);
  EXPECT_EQ(t->layers, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(t->n_steps, 2u);
  EXPECT_EQ(t->n_tokens, 3u);
  EXPECT_EQ(t->events[0].experts, (std::vector<int32_t>{3, 1}));
  ASSERT_EQ(t->events[0].weights.size(), 2u);
  EXPECT_FLOAT_EQ(t->events[0].weights[0], 0.6f);
  EXPECT_EQ(t->events[3].layer, 2u);
  EXPECT_EQ(t->events[3].pos, 1u);
  EXPECT_TRUE(t->events[4].weights.empty());
  EXPECT_EQ(t->events[5].step, 1u);
}

TEST(RoutingTrace, LinesWithoutStepAreOneStepPerPosition) {
  // logits --routing of old: layer-major, no step. Each position becomes its own step
  // and the events are ordered by step, then layer.
  const std::string path = write_file("nostep.jsonl",
                                      "{\"layer\": 0, \"pos\": 0, \"experts\": [1]}\n"
                                      "{\"layer\": 0, \"pos\": 1, \"experts\": [2]}\n"
                                      "{\"layer\": 1, \"pos\": 0, \"experts\": [3]}\n"
                                      "{\"layer\": 1, \"pos\": 1, \"experts\": [0]}\n");
  auto t = read_routing_trace(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_steps, 2u);
  EXPECT_EQ(t->n_tokens, 2u);
  std::vector<std::pair<uint64_t, uint32_t>> order;
  for (const RoutingEvent& e : t->events) order.emplace_back(e.step, e.layer);
  EXPECT_EQ(order, (std::vector<std::pair<uint64_t, uint32_t>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(t->events[1].experts, (std::vector<int32_t>{3}));
}

TEST(RoutingTrace, BadLinesNameTheFileAndLine) {
  const std::string good = "{\"layer\": 0, \"pos\": 0, \"step\": 0, \"experts\": [1, 2]}\n"
                           "{\"layer\": 1, \"pos\": 0, \"step\": 0, \"experts\": [0, 2]}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [1, 2]", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0}", "missing \"experts\""},
      {"{\"pos\": 0, \"step\": 0, \"experts\": [1, 2]}", "missing \"layer\""},
      {"{\"layer\": -1, \"pos\": 0, \"step\": 0, \"experts\": [1, 2]}", "\"layer\""},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [1, -2]}", "non-negative"},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [1, 2.5]}", "non-negative"},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [1, 2, 3]}", "3 experts, but line 1 has 2"},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [4, 4]}", "selected twice"},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": []}", "non-empty"},
      {"{\"layer\": 2, \"pos\": 0, \"experts\": [1, 2]}", "lacks \"step\""},
      {"{\"layer\": 2, \"pos\": 0, \"step\": 0, \"experts\": [1, 2], \"weights\": [1]}", "\"weights\" has 1"},
      {"{\"layer\": 1, \"pos\": 0, \"step\": 0, \"experts\": [3, 4]}", "repeats line 2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = write_file("bad" + std::to_string(i) + ".jsonl", good + cases[i].first + "\n");
    auto t = read_routing_trace(path);
    ASSERT_FALSE(t.ok()) << cases[i].first;
    const std::string msg = t.status().message();
    EXPECT_NE(msg.find(path + ":3: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(cases[i].second), std::string::npos) << msg;
  }
}

TEST(RoutingTrace, MissingAndEmptyFiles) {
  auto missing = read_routing_trace(test::temp_path("no-such.jsonl"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto empty = read_routing_trace(write_file("empty.jsonl", "\n  \n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no routing lines"), std::string::npos);
}

TEST(RoutingTrace, SyntheticIsDeterministicWithDistinctTopK) {
  SyntheticTraceOptions o;
  o.n_layers = 3;
  o.n_expert = 16;
  o.top_k = 4;
  o.n_tokens = 200;
  const RoutingTrace a = synthetic_trace(o), b = synthetic_trace(o);
  o.seed = 2;
  const RoutingTrace c = synthetic_trace(o);
  ASSERT_EQ(a.events.size(), 600u);
  EXPECT_EQ(a.n_steps, 200u);
  EXPECT_EQ(a.n_tokens, 200u);
  EXPECT_EQ(a.layers, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(a.top_k, 4u);
  EXPECT_LE(a.n_expert, 16u);
  bool differs = false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].experts, b.events[i].experts);
    differs |= a.events[i].experts != c.events[i].experts;
    const RoutingEvent& e = a.events[i];
    EXPECT_EQ(e.step, i / 3);
    EXPECT_EQ(e.pos, i / 3);
    EXPECT_EQ(e.layer, i % 3);
    ASSERT_EQ(e.experts.size(), 4u);
    EXPECT_EQ(std::set<int32_t>(e.experts.begin(), e.experts.end()).size(), 4u);
    for (int32_t x : e.experts) {
      EXPECT_GE(x, 0);
      EXPECT_LT(x, 16);
    }
  }
  EXPECT_TRUE(differs);
}

// Share of the layer's selections taken by its most selected expert, averaged over layers.
double top_share(const RoutingTrace& t) {
  std::map<uint32_t, std::map<int32_t, uint64_t>> counts;
  for (const RoutingEvent& e : t.events) {
    for (int32_t x : e.experts) ++counts[e.layer][x];
  }
  double sum = 0;
  for (const auto& [layer, c] : counts) {
    uint64_t top = 0, total = 0;
    for (const auto& [x, n] : c) {
      top = std::max(top, n);
      total += n;
    }
    sum += static_cast<double>(top) / static_cast<double>(total);
  }
  return sum / static_cast<double>(counts.size());
}

TEST(RoutingTrace, SkewConcentratesEachLayerOnItsOwnExperts) {
  SyntheticTraceOptions o;
  o.n_layers = 8;
  o.n_tokens = 400;
  o.locality = 0;
  o.skew = 0;
  const double uniform = top_share(synthetic_trace(o));
  o.skew = 1.5;
  const RoutingTrace skewed = synthetic_trace(o);
  const double zipf = top_share(skewed);
  EXPECT_GT(zipf, uniform + 0.03) << uniform << " vs " << zipf;
  // Each layer has its own permutation: the busiest expert is not the same everywhere.
  std::set<int32_t> busiest;
  for (uint32_t l = 0; l < o.n_layers; ++l) {
    std::map<int32_t, uint64_t> c;
    for (const RoutingEvent& e : skewed.events) {
      if (e.layer != l) continue;
      for (int32_t x : e.experts) ++c[x];
    }
    busiest.insert(std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.second < b.second; })->first);
  }
  EXPECT_GT(busiest.size(), 2u);
}

// Fraction of (token, layer, rank) picks equal to the previous token's pick at that rank.
double repeat_rate(const RoutingTrace& t) {
  std::map<uint32_t, std::vector<int32_t>> prev;
  uint64_t same = 0, total = 0;
  for (const RoutingEvent& e : t.events) {
    auto& p = prev[e.layer];
    if (!p.empty()) {
      for (size_t r = 0; r < e.experts.size(); ++r) same += e.experts[r] == p[r];
      total += e.experts.size();
    }
    p = e.experts;
  }
  return static_cast<double>(same) / static_cast<double>(total);
}

TEST(RoutingTrace, LocalityRaisesRepeats) {
  SyntheticTraceOptions o;
  o.n_layers = 4;
  o.n_tokens = 300;
  o.locality = 0;
  const double none = repeat_rate(synthetic_trace(o));
  o.locality = 0.8;
  const double high = repeat_rate(synthetic_trace(o));
  EXPECT_LT(none, 0.15);
  EXPECT_GT(high, 0.7);
}

}  // namespace
}  // namespace mt
