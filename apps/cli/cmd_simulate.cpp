// moetier simulate: a routing record (or a synthetic Zipf stream with temporal locality)
// replayed through the expert cache with a budget, policy and mode; per layer and overall
// hit rate, CPU experts per token and host-to-device bytes per token, and the predicted
// decode tokens/s of each mode from the hardware profile. The geometry comes from the
// GGUF's metadata alone, so a `synth --sparse` file of a 235B model works.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "apps/cli/commands.h"
#include "apps/cli/model_sizes.h"
#include "apps/cli/tiering_flags.h"
#include "experts/replay.h"
#include "experts/stats.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

struct SimulateFlags {
  std::string model, trace, device = "cpu";
  bool synthetic = false, json = false;
  SyntheticTraceOptions synth;
  TieringFlags tiering;
};

int run(SimulateFlags f) {
  if (f.trace.empty() == !f.synthetic) return fail("simulate", invalid_argument("give exactly one of --trace FILE and --synthetic"));
  if (f.tiering.expert_cache.empty()) return fail("simulate", invalid_argument("--expert-cache SIZE|N% is required"));
  auto file = gguf::GgufFile::open(f.model);
  if (!file.ok()) return fail("simulate", file.status());
  auto setup = make_tiering_setup(*file, f.tiering);
  if (!setup.ok()) return fail("simulate", setup.status());
  // The defaults of the device replayed for (the admission cap, the split of misses).
  if (Status st = apply_device_defaults(f.tiering, f.device == "cuda", *setup); !st.ok()) return fail("simulate", st);
  auto sizes = read_model_sizes(*file);
  if (!sizes.ok()) return fail("simulate", sizes.status());
  const ExpertGeometry& g = setup->geometry;

  RoutingTrace trace;
  if (f.synthetic) {
    if (f.synth.n_tokens == 0) return fail("simulate", invalid_argument("--tokens must be at least 1"));
    if (f.synth.skew < 0 || f.synth.locality < 0 || f.synth.locality > 1) {
      return fail("simulate", invalid_argument("--skew must be >= 0 and --locality in [0, 1]"));
    }
    f.synth.n_layers = static_cast<uint32_t>(g.layers.size());
    f.synth.n_expert = g.n_expert;
    f.synth.top_k = sizes->n_expert_used;
    trace = synthetic_trace(f.synth);
    for (RoutingEvent& e : trace.events) e.layer = g.layers[e.layer].layer;  // MoE index -> block index
    for (uint32_t& l : trace.layers) l = g.layers[l].layer;
  } else {
    auto t = read_routing_trace(f.trace);
    if (!t.ok()) return fail("simulate", t.status());
    trace = std::move(*t);
  }
  const uint32_t n_blocks = g.layers.back().layer + 1;
  ExpertScheduler scheduler(g, setup->plan, n_blocks, setup->cache, setup->scheduler);
  auto traffic = replay_trace(trace, scheduler, g.n_expert);
  if (!traffic.ok()) return fail("simulate", traffic.status());

  // Decode speed of each mode from the same cache behaviour.
  const double dense = static_cast<double>(sizes->dense_bytes + sizes->token_embd_row_bytes);
  const double shared = static_cast<double>(sizes->shared_expert_bytes);
  const QuantType type = g.layers.front().up().type;
  const HwProfile& hw = setup->scheduler.hw;
  nlohmann::ordered_json predicted = nlohmann::ordered_json::object();
  std::string text;
  for (MoeMode m : {MoeMode::kCpu, MoeMode::kStream, MoeMode::kHybrid}) {
    const DecodeTraffic t = decode_traffic(*traffic, m, dense, shared, static_cast<uint32_t>(g.layers.size()), type);
    const ModePrediction p = predict_decode(m, t, hw);
    predicted[moe_mode_name(m)] = {{"tokens_per_s", p.tokens_per_s}, {"bottleneck", p.bottleneck}};
    char line[200];
    std::snprintf(line, sizeof line, "predicted %-6s %8.2f tok/s (bottleneck: %s)\n", moe_mode_name(m), p.tokens_per_s,
                  p.bottleneck.c_str());
    text += line;
  }
  if (f.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(stats_json(scheduler, setup->policy, setup->budget));
    j["trace"] = {{"source", f.synthetic ? "synthetic" : f.trace}, {"steps", trace.n_steps}, {"tokens", trace.n_tokens},
                  {"decode_tokens", traffic->decode_tokens}};
    j["hw_profile_source"] = hw.source;
    j["predicted"] = predicted;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", stats_text(scheduler, setup->policy, setup->budget).c_str());
    std::printf("trace: %llu steps, %llu tokens (%llu decode); hardware profile: %s\n",
                static_cast<unsigned long long>(trace.n_steps), static_cast<unsigned long long>(trace.n_tokens),
                static_cast<unsigned long long>(traffic->decode_tokens), hw.source.c_str());
    std::printf("%s", text.c_str());
  }
  return 0;
}

}  // namespace

Runner add_simulate(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  app.add_option("-m,--model", f->model, "GGUF model (metadata only; a synth --sparse file works)")->required();
  app.add_option("--trace", f->trace, "routing record (run --record-routing / logits --routing JSON lines)");
  app.add_flag("--synthetic", f->synthetic, "a synthetic Zipf routing stream with temporal locality instead");
  app.add_option("--tokens", f->synth.n_tokens, "synthetic: decode tokens (default 512)");
  app.add_option("--skew", f->synth.skew, "synthetic: Zipf exponent of expert popularity (default 1)");
  app.add_option("--locality", f->synth.locality, "synthetic: chance a pick repeats the previous token's (default 0.5)");
  app.add_option("--seed", f->synth.seed, "synthetic: random seed (default 1)");
  add_tiering_flags(app, &f->tiering);
  app.add_option("--device", f->device,
                 "the defaults of which run to replay: cpu (the simulated device; default) or cuda (2 admissions "
                 "per layer-step, the split of misses on)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", f->json, "JSON (the schema of run --stats-json, plus trace and predicted)");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
