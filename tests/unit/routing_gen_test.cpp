// experts/routing_gen.h: the generator's measured reuse, window and skew match its
// parameters within 2 percentage points over 10,000 steps; it is deterministic per seed
// and per layer whatever the call order; spec strings parse (presets, overrides) and bad
// ones name the key; a recorded trace replays through TraceStream with the recorded ids
// exactly, step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>

#include "experts/routing_gen.h"
#include "test_util.h"

namespace mt {
namespace {

// The skew statistic: of the fresh picks (experts none of the last `window` tokens
// selected), the share that lands on the layer's most popular quarter, measured and
// expected. The expectation sums, for each fresh pick in draw order, the probability the
// generator's conditional draw gives the top quarter: its weight there over the weight of
// every expert not yet excluded (the window's and the token's earlier picks).
struct SkewCheck {
  double measured = 0, expected = 0;
  uint64_t fresh = 0;
};

SkewCheck check_skew(RoutingGenerator& gen, uint32_t layers, uint64_t tokens) {
  const RoutingGenParams& p = gen.params();
  SkewCheck out;
  double hits = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    const std::vector<double>& w = gen.popularity(l);
    std::vector<uint32_t> order(p.n_expert);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return w[a] > w[b]; });
    std::vector<uint8_t> top(p.n_expert, 0);
    for (uint32_t i = 0; i < p.n_expert / 4; ++i) top[order[i]] = 1;
    std::vector<std::vector<int32_t>> history;  // newest first
    for (uint64_t t = 0; t < tokens; ++t) {
      const std::vector<int32_t> s = gen.next(l);
      std::vector<uint8_t> excluded(p.n_expert, 0);
      for (const auto& h : history) {
        for (int32_t e : h) excluded[static_cast<size_t>(e)] = 1;
      }
      const bool counted = history.size() == p.window;  // a full window: the draws are as defined
      for (int32_t e : s) {
        const auto x = static_cast<size_t>(e);
        if (!excluded[x] && counted) {
          double all = 0, in_top = 0;
          for (uint32_t c = 0; c < p.n_expert; ++c) {
            if (excluded[c]) continue;
            all += w[c];
            in_top += top[c] ? w[c] : 0.0;
          }
          out.expected += in_top / all;
          hits += top[x];
          ++out.fresh;
        }
        excluded[x] = 1;  // the token's later picks exclude it
      }
      history.insert(history.begin(), s);
      if (history.size() > p.window) history.pop_back();
    }
  }
  out.measured = hits / static_cast<double>(out.fresh);
  out.expected /= static_cast<double>(out.fresh);
  return out;
}

void expect_parameters_hold(const RoutingGenParams& p) {
  constexpr uint64_t kTokens = 10000;
  const RoutingTrace t = generate_trace(p, kTokens);
  ASSERT_EQ(t.events.size(), kTokens * p.n_layers);
  const LocalityStats m = measure_locality(t, p.window);
  EXPECT_NEAR(m.reuse, p.reuse, 0.02) << "reuse";
  EXPECT_NEAR(m.within, p.within, 0.02) << "within the window";
  if (p.reuse < 1) {
    EXPECT_NEAR(m.window_rest, (p.within - p.reuse) / (1 - p.reuse), 0.02) << "the window's share of the rest";
  }
  RoutingGenerator gen(p);
  const SkewCheck s = check_skew(gen, p.n_layers, kTokens);
  EXPECT_GT(s.fresh, kTokens * p.n_layers * p.top_k * (1 - p.within) * 0.9);
  EXPECT_NEAR(s.measured, s.expected, 0.02) << "skew: top-quarter share of fresh picks";
}

TEST(RoutingGen, MeasuredParametersMatchQwen3Preset) {
  auto spec = parse_routing_gen_spec("synth:preset=qwen3-30b,seed=7");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  spec->params.n_layers = 3;
  expect_parameters_hold(spec->params);
}

TEST(RoutingGen, MeasuredParametersMatchOtherSettings) {
  RoutingGenParams p;
  p.n_layers = 2;
  p.n_expert = 64;
  p.top_k = 6;
  p.reuse = 0.2;
  p.window = 4;
  p.within = 0.5;
  p.skew = 0.8;
  p.seed = 11;
  expect_parameters_hold(p);
  p.skew = 0;  // uniform: the fresh picks' top-quarter share is the candidates' quarter
  p.reuse = 0.6;
  p.within = 0.7;
  expect_parameters_hold(p);
}

TEST(RoutingGen, SkewConcentratesFreshPicks) {
  RoutingGenParams p;
  p.n_layers = 2;
  p.skew = 0;
  RoutingGenerator flat(p);
  const SkewCheck uniform = check_skew(flat, 2, 2000);
  p.skew = 1.6;
  RoutingGenerator zipf(p);
  const SkewCheck skewed = check_skew(zipf, 2, 2000);
  EXPECT_LT(uniform.expected, 0.30);
  EXPECT_GT(skewed.expected, uniform.expected + 0.2);
  EXPECT_GT(skewed.measured, uniform.measured + 0.2);
}

TEST(RoutingGen, DeterministicPerSeedAndLayerWhateverTheCallOrder) {
  RoutingGenParams p;
  p.n_layers = 3;
  p.n_expert = 32;
  p.top_k = 4;
  RoutingGenerator a(p), b(p);
  std::vector<std::vector<int32_t>> by_layer_a[3], by_layer_b[3];
  for (int t = 0; t < 200; ++t) {
    for (uint32_t l = 0; l < 3; ++l) by_layer_a[l].push_back(a.next(l));
  }
  for (uint32_t l = 3; l-- > 0;) {  // layer-major, backwards: the same streams
    for (int t = 0; t < 200; ++t) by_layer_b[l].push_back(b.next(l));
  }
  for (uint32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(by_layer_a[l], by_layer_b[l]) << "layer " << l;
    for (const auto& s : by_layer_a[l]) {
      ASSERT_EQ(s.size(), 4u);
      EXPECT_EQ(std::set<int32_t>(s.begin(), s.end()).size(), 4u);
      for (int32_t e : s) EXPECT_TRUE(e >= 0 && e < 32);
    }
  }
  EXPECT_NE(by_layer_a[0], by_layer_a[1]);
  p.seed = 2;
  RoutingGenerator c(p);
  bool differs = false;
  for (int t = 0; t < 200; ++t) differs |= c.next(0) != by_layer_a[0][static_cast<size_t>(t)];
  EXPECT_TRUE(differs);
}

TEST(RoutingGen, SpecParsesPresetsAndOverrides) {
  auto q = parse_routing_gen_spec("synth:preset=qwen3-30b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->params.n_expert, 128u);
  EXPECT_EQ(q->params.top_k, 8u);
  EXPECT_DOUBLE_EQ(q->params.reuse, 0.45);
  EXPECT_EQ(q->params.window, 8u);
  EXPECT_DOUBLE_EQ(q->params.within, 0.80);
  EXPECT_TRUE(q->geometry_given);
  auto big = parse_routing_gen_spec("synth:preset=512,skew=0.5,seed=9,tokens=100");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->params.n_expert, 512u);
  EXPECT_EQ(big->params.top_k, 10u);
  EXPECT_DOUBLE_EQ(big->params.skew, 0.5);
  EXPECT_EQ(big->params.seed, 9u);
  EXPECT_EQ(big->tokens, 100u);
  auto plain = parse_routing_gen_spec("reuse=0.3,window=1");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(plain->geometry_given);
  EXPECT_DOUBLE_EQ(plain->params.within, 0.3);  // window 1: the window is the previous token
  auto src = parse_routing_source("trace:/tmp/x.jsonl");
  ASSERT_TRUE(src.ok());
  EXPECT_FALSE(src->synthetic);
  EXPECT_EQ(src->path, "/tmp/x.jsonl");
  EXPECT_TRUE(parse_routing_source("synth:preset=256")->synthetic);
}

TEST(RoutingGen, BadSpecsNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"synth:reuse=abc", "reuse"},         {"synth:reuse=1.5", "reuse"},
      {"synth:window=0", "window"},         {"synth:window=-3", "window"},
      {"synth:within=0.2,reuse=0.4", "within"}, {"synth:skew=-1", "skew"},
      {"synth:preset=999", "preset"},       {"synth:colour=red", "colour"},
      {"synth:top-k=300", "top-k"},         {"synth:reuse", "reuse"},
      {"synth:seed=1e3", "seed"},           {"synth:window=1,within=0.9", "within"},
      {"synth:tokens=0", "tokens"},
  };
  for (const auto& [spec, key] : cases) {
    auto s = parse_routing_gen_spec(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(s.status().message().find(key), std::string::npos) << spec << ": " << s.status().message();
  }
}

TEST(RoutingGen, RecordedTraceReplaysExactlyStepByStep) {
  // A record in the format of run --record-routing: a prompt batch (step 0, three
  // positions) and then decode steps generated by the generator, written as JSON lines.
  RoutingGenParams p;
  p.n_layers = 2;
  p.n_expert = 64;
  p.top_k = 6;
  p.seed = 5;
  const std::vector<uint32_t> blocks = {1, 3};  // MoE layers at blocks 1 and 3
  RoutingGenerator gen(p);
  std::vector<std::vector<int32_t>> expected[2];
  const std::string path = test::temp_path("gen_record.jsonl");
  {
    std::ofstream out(path);
    for (uint32_t pos = 0; pos < 40; ++pos) {
      const uint64_t step = pos < 3 ? 0 : pos - 2;
      for (uint32_t l = 0; l < 2; ++l) {
        const std::vector<int32_t>& e = gen.next(l);
        expected[l].push_back(e);
        out << "{\"layer\": " << blocks[l] << ", \"pos\": " << pos << ", \"step\": " << step << ", \"experts\": [";
        for (size_t i = 0; i < e.size(); ++i) out << (i ? ", " : "") << e[i];
        out << "], \"weights\": [";
        for (size_t i = 0; i < e.size(); ++i) out << (i ? ", " : "") << 1.0 / static_cast<double>(e.size());
        out << "]}\n";
      }
    }
  }
  auto trace = read_routing_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->n_steps, 38u);
  EXPECT_EQ(trace->n_tokens, 40u);
  TraceStream stream(*trace);
  EXPECT_EQ(stream.top_k(), 6u);
  for (size_t t = 0; t < 40; ++t) {
    for (uint32_t l = 0; l < 2; ++l) ASSERT_EQ(stream.next(blocks[l]), expected[l][t]) << "token " << t << " layer " << l;
  }
  EXPECT_TRUE(stream.next(1).empty());  // exhausted
  EXPECT_TRUE(stream.next(0).empty());  // a block the trace does not route
  EXPECT_TRUE(stream.next(99).empty());
}

TEST(RoutingGen, GeneratedTraceIsTheStream) {
  RoutingGenParams p;
  p.n_layers = 2;
  p.n_expert = 16;
  p.top_k = 2;
  const RoutingTrace t = generate_trace(p, 50, {4, 7});
  EXPECT_EQ(t.layers, (std::vector<uint32_t>{4, 7}));
  EXPECT_EQ(t.n_steps, 50u);
  RoutingGenerator gen(p);
  for (size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(t.events[i].step, i / 2);
    EXPECT_EQ(t.events[i].layer, i % 2 ? 7u : 4u);
    EXPECT_EQ(t.events[i].experts, gen.next(static_cast<uint32_t>(i % 2)));
  }
}

TEST(RoutingGen, LocalityOfAHandMadeTrace) {
  // Layer 0: {0,1} {1,2} {3,4} {0,5}: reuse 1/2 then 0 then 0 -> 1/6; the median reuse
  // distance of the repeats (1 at distance 1, 0 at distance 3) is 3 (the upper median).
  RoutingTrace t;
  t.top_k = 2;
  t.n_expert = 6;
  t.layers = {0};
  const std::vector<std::vector<int32_t>> sel = {{0, 1}, {1, 2}, {3, 4}, {0, 5}};
  for (size_t i = 0; i < sel.size(); ++i) t.events.push_back({0, static_cast<uint32_t>(i), i, sel[i], {}});
  const LocalityStats m = measure_locality(t, 3, 2);
  EXPECT_NEAR(m.reuse, 1.0 / 6.0, 1e-12);
  EXPECT_EQ(m.median_distance, 3.0);
  // Window 3 from token 3 on: {0, 5}: 0 was selected 3 tokens before (in), 5 never.
  EXPECT_NEAR(m.within, 0.5, 1e-12);
  EXPECT_NEAR(m.touched, (3.0 + 4.0) / 2.0, 1e-12);  // {0,1,2}, {0,3,4,5}
}

}  // namespace
}  // namespace mt
