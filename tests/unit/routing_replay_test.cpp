// Routing replay (experts/routing_replay.h): the generator's and a trace's ids in place of
// the router's, in stream order per MoE block (generator layer i = the i-th MoE block); a
// trace's weights when it has them, its start-over when it runs out; one-line errors for a
// spec or trace the model's geometry does not fit. In the engine (CPU, resident and tiered
// through the simulated device): the routing the Trace reports is the stream's, the logits
// differ from the router's own, a record of the replayed run replays to bit-identical
// logits, and the tiered cache looks up exactly the stream's experts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "experts/geometry.h"
#include "experts/routing_replay.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

// A trace file: per step, every layer's events (experts, and weights when given).
struct TraceLine {
  uint32_t layer, pos;
  uint64_t step;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};
std::string write_trace(const std::string& name, const std::vector<TraceLine>& lines) {
  const std::string path = test::temp_path(name);
  std::ofstream out(path);
  for (const TraceLine& l : lines) {
    out << "{\"layer\": " << l.layer << ", \"pos\": " << l.pos << ", \"step\": " << l.step << ", \"experts\": [";
    for (size_t i = 0; i < l.experts.size(); ++i) out << (i ? ", " : "") << l.experts[i];
    out << "]";
    if (!l.weights.empty()) {
      out << ", \"weights\": [";
      for (size_t i = 0; i < l.weights.size(); ++i) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(l.weights[i]));
        out << (i ? ", " : "") << buf;
      }
      out << "]";
    }
    out << "}\n";
  }
  return path;
}

TEST(RoutingReplay, SynthGivesTheGeneratorsStreamPerMoeBlock) {
  const ReplayGeometry g{{1, 2, 4}, 16, 4};
  auto r = RoutingReplay::create("synth:reuse=0.5,window=4,within=0.75,skew=1,seed=7", g);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE((*r)->has_weights());
  RoutingGenParams p;
  p.n_layers = 3, p.n_expert = 16, p.top_k = 4, p.reuse = 0.5, p.window = 4, p.within = 0.75, p.skew = 1, p.seed = 7;
  RoutingGenerator gen(p);
  // Rows of several calls, blocks interleaved as a forward pass does: each block continues its own stream.
  for (uint32_t rows : {5u, 1u, 1u, 3u}) {
    for (uint32_t i = 0; i < 3; ++i) {
      std::vector<int32_t> ids(rows * 4, -1);
      std::vector<float> w(rows * 4, 0.25f);
      (*r)->replace(g.moe_blocks[i], rows, ids.data(), w.data());
      for (uint32_t t = 0; t < rows; ++t) {
        const std::vector<int32_t>& want = gen.next(i);
        EXPECT_EQ(std::vector<int32_t>(ids.begin() + t * 4, ids.begin() + t * 4 + 4), want) << "block " << g.moe_blocks[i];
      }
      EXPECT_EQ(w, std::vector<float>(rows * 4, 0.25f));  // the router's weights stay
    }
  }
  EXPECT_EQ((*r)->rows_replaced(), 3u * 10);
}

// rewind() gives the same stream again: a generator from its seed, a trace from its first
// event; the counts keep counting.
TEST(RoutingReplay, RewindGivesTheSameStreamAgain) {
  const ReplayGeometry g{{0, 3}, 32, 4};
  auto r = RoutingReplay::create("synth:preset=qwen3-30b,experts=32,top-k=4,seed=3", g);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto take = [&](RoutingReplay& replay) {
    std::vector<int32_t> all;
    for (uint32_t rows : {7u, 1u, 2u}) {
      for (uint32_t block : g.moe_blocks) {
        std::vector<int32_t> ids(rows * 4, -1);
        replay.replace(block, rows, ids.data(), nullptr);
        all.insert(all.end(), ids.begin(), ids.end());
      }
    }
    return all;
  };
  const std::vector<int32_t> first = take(**r);
  const std::vector<int32_t> second = take(**r);
  EXPECT_NE(first, second);  // the stream goes on
  (*r)->rewind();
  EXPECT_EQ(take(**r), first);
  EXPECT_EQ((*r)->rows_replaced(), 3u * 2 * 10);

  // mark() / back_to_mark(kept): of a step's 5 rows, 2 kept; the next step's first rows get
  // the entries the rejected rows had.
  (*r)->rewind();
  std::vector<int32_t> step(5 * 4), again(3 * 4);
  (*r)->mark();
  (*r)->replace(0, 5, step.data(), nullptr);
  (*r)->back_to_mark(2);
  (*r)->replace(0, 3, again.data(), nullptr);
  EXPECT_EQ(again, std::vector<int32_t>(step.begin() + 2 * 4, step.end()));
  EXPECT_EQ(std::vector<int32_t>(step.begin(), step.begin() + 4), std::vector<int32_t>(first.begin(), first.begin() + 4));

  std::vector<TraceLine> lines;
  for (uint64_t s = 0; s < 5; ++s) lines.push_back({0, static_cast<uint32_t>(s), s, {static_cast<int32_t>(s), 7}, {}});
  auto t = RoutingReplay::create("trace:" + write_trace("rewind.jsonl", lines), ReplayGeometry{{0}, 8, 2});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<int32_t> ids(6);
  (*t)->replace(0, 3, ids.data(), nullptr);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 7, 1, 7, 2, 7}));
  (*t)->rewind();
  (*t)->replace(0, 3, ids.data(), nullptr);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 7, 1, 7, 2, 7}));
}

// The stream as the engine takes it (rows in uneven calls, blocks interleaved, the model's
// block numbers) keeps the generator's parameters: reuse and the window's share within
// 2 points over 10,000 tokens, for every preset.
TEST(RoutingReplay, ReplayedPresetsKeepTheirMeasuredLocality) {
  for (const char* preset : {"qwen3-30b", "256", "512"}) {
    SCOPED_TRACE(preset);
    auto spec = parse_routing_gen_spec(std::string("synth:preset=") + preset);
    ASSERT_TRUE(spec.ok());
    const RoutingGenParams& p = spec->params;
    const ReplayGeometry g{{1, 3}, p.n_expert, p.top_k};
    auto r = RoutingReplay::create(std::string("synth:preset=") + preset + ",seed=5", g);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    RoutingTrace t;
    t.n_expert = p.n_expert, t.top_k = p.top_k, t.layers = g.moe_blocks;
    constexpr uint32_t kTokens = 10000;
    std::vector<int32_t> ids;
    for (uint32_t done = 0, chunk = 1; done < kTokens; done += chunk, chunk = chunk % 7 + 1) {
      const uint32_t rows = std::min(chunk, kTokens - done);
      for (uint32_t block : g.moe_blocks) {
        ids.assign(static_cast<size_t>(rows) * p.top_k, -1);
        (*r)->replace(block, rows, ids.data(), nullptr);
        for (uint32_t i = 0; i < rows; ++i) {
          RoutingEvent ev;
          ev.layer = block, ev.pos = ev.step = done + i;
          ev.experts.assign(ids.begin() + i * p.top_k, ids.begin() + (i + 1) * p.top_k);
          t.events.push_back(std::move(ev));
        }
      }
    }
    const LocalityStats m = measure_locality(t, p.window);
    EXPECT_NEAR(m.reuse, p.reuse, 0.02);
    EXPECT_NEAR(m.within, p.within, 0.02);
  }
}

TEST(RoutingReplay, TraceGivesItsIdsAndWeightsInOrderAndStartsOver) {
  std::vector<TraceLine> lines;
  for (uint64_t s = 0; s < 3; ++s) {
    for (uint32_t layer : {0u, 1u}) {
      const int32_t b = static_cast<int32_t>(s * 2 + layer);
      lines.push_back({layer, static_cast<uint32_t>(s), s, {b, b + 1}, {0.75f, 0.25f + 0.01f * static_cast<float>(b)}});
    }
  }
  const ReplayGeometry g{{0, 1}, 8, 2};
  auto r = RoutingReplay::create("trace:" + write_trace("w.jsonl", lines), g);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE((*r)->has_weights());
  std::vector<int32_t> ids(8);
  std::vector<float> w(8);
  (*r)->replace(1, 4, ids.data(), w.data());  // three events, then the first again
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 1, 2}));
  EXPECT_FLOAT_EQ(w[1], 0.26f);
  EXPECT_FLOAT_EQ(w[5], 0.30f);
  EXPECT_EQ((*r)->wraps(), 1u);
  (*r)->replace(0, 1, ids.data(), w.data());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);

  for (TraceLine& l : lines) l.weights.clear();
  auto bare = RoutingReplay::create("trace:" + write_trace("bare.jsonl", lines), g);
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  EXPECT_FALSE((*bare)->has_weights());
  std::fill(w.begin(), w.end(), 0.5f);
  (*bare)->replace(0, 2, ids.data(), w.data());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(w, std::vector<float>(8, 0.5f));
}

TEST(RoutingReplay, SpecsAndTracesTheModelCannotTakeAreOneLineErrors) {
  const ReplayGeometry g{{0, 1}, 8, 2};
  const std::string ok_trace = write_trace("ok.jsonl", {{0, 0, 0, {1, 2}, {}}, {1, 0, 0, {3, 4}, {}}});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"synth:preset=256", "256 experts top-8, the model has 8 experts top-2"},
      {"synth:experts=16", "16 experts"},
      {"synth:reuse=2", "reuse=2"},
      {"synth:colour=red", "unknown key 'colour'"},
      {"trace:", "give synth:KEY=VALUE"},
      {"trace:/nonexistent/r.jsonl", "/nonexistent/r.jsonl"},
      {"trace:" + write_trace("k3.jsonl", {{0, 0, 0, {1, 2, 3}, {}}, {1, 0, 0, {3, 4, 5}, {}}}),
       "selects 3 experts per token, the model 2"},
      {"trace:" + write_trace("id.jsonl", {{0, 0, 0, {1, 9}, {}}, {1, 0, 0, {3, 4}, {}}}), "names expert 9"},
      {"trace:" + write_trace("layers.jsonl", {{0, 0, 0, {1, 2}, {}}, {3, 0, 0, {3, 4}, {}}}),
       "routes layers 0, 3, the model's MoE layers are 0-1"},
  };
  for (const auto& [value, want] : cases) {
    auto r = RoutingReplay::create(value, g);
    ASSERT_FALSE(r.ok()) << value;
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find(want), std::string::npos) << value << ": " << msg;
    EXPECT_EQ(msg.rfind("--routing", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_TRUE(RoutingReplay::create("trace:" + ok_trace, g).ok());
  EXPECT_TRUE(RoutingReplay::create("synth:preset=qwen3-30b", {{0}, 128, 8}).ok());
}

// Carries a replay (or none) and records every reported routing row, per layer in order.
class ReplayRecorder final : public Trace {
 public:
  explicit ReplayRecorder(RoutingReplay* replay) : replay_(replay) {}
  RoutingReplay* routing_override() override { return replay_; }
  void begin_step() override {
    ++step;
    distinct.emplace_back();
  }
  void routing(uint32_t layer, uint32_t pos, std::span<const int32_t> e, std::span<const float> w) override {
    if (ids.size() <= layer) ids.resize(layer + 1);
    ids[layer].push_back({e.begin(), e.end()});
    lines.push_back({layer, pos, step - 1, {e.begin(), e.end()}, {w.begin(), w.end()}});
    if (distinct.back().size() <= layer) distinct.back().resize(layer + 1);
    distinct.back()[layer].insert(e.begin(), e.end());
  }
  std::vector<std::vector<std::vector<int32_t>>> ids;  // [layer][row] experts
  std::vector<TraceLine> lines;
  std::vector<std::vector<std::set<int32_t>>> distinct;  // [step][layer]
  uint64_t step = 0;

 private:
  RoutingReplay* replay_;
};

// A 12-token prompt, then 6 decode steps; every step's logits appended.
std::vector<float> run_steps(const Model& model, MoeOffload* offload, Trace* trace) {
  auto s = Session::create(model, 32);
  EXPECT_TRUE(s.ok());
  s->set_offload(offload);
  const uint32_t V = model.hparams().n_vocab;
  std::vector<int32_t> ids(18);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % V);
  std::vector<float> all, step;
  EXPECT_TRUE(s->feed({ids.data(), 12}, true, &step, trace).ok());
  all = step;
  for (size_t t = 12; t < ids.size(); ++t) {
    EXPECT_TRUE(s->feed({&ids[t], 1}, false, &step, trace).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(RoutingReplay, TheCpuEngineComputesTheStreamsExpertsResidentAndTiered) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  c.router_skew = 1.0f;
  const std::string path = test::temp_path("qwen3moe-replay.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto loaded = Model::load(path, {2});
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const Model& model = **loaded;
  const HParams& hp = model.hparams();
  ReplayGeometry g{{}, hp.n_expert, hp.n_expert_used};
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    if (model.weights().layers[l].is_moe()) g.moe_blocks.push_back(l);
  }
  ASSERT_FALSE(g.moe_blocks.empty());
  const std::string spec = "synth:reuse=0.5,window=4,within=0.7,skew=0.8,seed=3";

  ReplayRecorder plain(nullptr);
  const std::vector<float> own = run_steps(model, nullptr, &plain);
  auto replay = RoutingReplay::create(spec, g);
  ASSERT_TRUE(replay.ok()) << replay.status().to_string();
  ReplayRecorder resident(replay->get());
  const std::vector<float> replayed = run_steps(model, nullptr, &resident);

  // The rows reported are the generator's stream, block by block (12 + 6 rows each).
  RoutingGenParams p;
  p.n_layers = static_cast<uint32_t>(g.moe_blocks.size()), p.n_expert = g.n_expert, p.top_k = g.top_k;
  p.reuse = 0.5, p.window = 4, p.within = 0.7, p.skew = 0.8, p.seed = 3;
  RoutingGenerator gen(p);
  for (uint32_t i = 0; i < g.moe_blocks.size(); ++i) {
    ASSERT_EQ(resident.ids[g.moe_blocks[i]].size(), 18u);
    for (const std::vector<int32_t>& row : resident.ids[g.moe_blocks[i]]) EXPECT_EQ(row, gen.next(i));
  }
  ASSERT_EQ(replayed.size(), own.size());
  EXPECT_NE(std::memcmp(replayed.data(), own.data(), own.size() * sizeof(float)), 0) << "the router's experts were computed";
  EXPECT_NE(plain.ids, resident.ids);

  // The replayed run's record (ids and the weights used) replays to the same logits.
  auto again = RoutingReplay::create("trace:" + write_trace("replayed.jsonl", resident.lines), g);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_TRUE((*again)->has_weights());
  ReplayRecorder from_trace(again->get());
  const std::vector<float> retraced = run_steps(model, nullptr, &from_trace);
  EXPECT_EQ(from_trace.ids, resident.ids);
  ASSERT_EQ(std::memcmp(retraced.data(), replayed.data(), replayed.size() * sizeof(float)), 0);

  // Tiered (--expert-cache 25% on the simulated device): the same logits, and the cache
  // looked up exactly the stream's distinct experts of every layer-step.
  auto geometry = read_expert_geometry(model.file());
  ASSERT_TRUE(geometry.ok());
  auto state = make_offload(model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), {}, {});
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  auto tiered_replay = RoutingReplay::create(spec, g);
  ASSERT_TRUE(tiered_replay.ok());
  ReplayRecorder tiered(tiered_replay->get());
  const std::vector<float> tiered_logits = run_steps(model, &(*state)->offload, &tiered);
  EXPECT_EQ(tiered.ids, resident.ids);
  ASSERT_EQ(std::memcmp(tiered_logits.data(), replayed.data(), replayed.size() * sizeof(float)), 0);
  const ExpertScheduler& s = *(*state)->scheduler;
  for (uint32_t l : g.moe_blocks) {
    uint64_t distinct = 0;
    for (const auto& step : tiered.distinct) distinct += l < step.size() ? step[l].size() : 0;
    const CacheCounters& k = s.cache().counters(l);
    EXPECT_EQ(k.hits + k.misses, distinct) << "layer " << l;
  }
}

}  // namespace
}  // namespace mt
