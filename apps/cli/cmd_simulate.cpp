// moetier simulate: a routing record (or a generated stream: --routing synth:..., see
// experts/routing_gen.h; or the older --synthetic Zipf stream) replayed through the expert
// cache with a budget, policy and mode; per layer and overall hit rate, CPU experts per
// token and host-to-device bytes per token, and the predicted decode tokens/s of each mode
// from the hardware profile. The geometry comes from the GGUF's metadata alone, so a
// `synth --sparse` file of a 235B model works. --cache-policy auto picks lru, frequency or
// lru2 by their hit rates on the stream's first --warmup steps (experts/policy_study.h);
// --sweep-budgets tabulates hit rate against budget for each of --sweep-policies.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "apps/cli/commands.h"
#include "apps/cli/model_sizes.h"
#include "apps/cli/tiering_flags.h"
#include "experts/policy_study.h"
#include "experts/replay.h"
#include "experts/routing_gen.h"
#include "experts/stats.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

struct SimulateFlags {
  std::string model, trace, routing, device = "cpu";
  bool synthetic = false, json = false;
  SyntheticTraceOptions synth;
  TieringFlags tiering;
  uint64_t warmup = 128;
  std::vector<std::string> sweep_budgets, sweep_policies = {"lru", "frequency", "lru2"};
};

// The routing to replay: a record (--trace, --routing trace:FILE), a generated stream
// (--routing synth:...) or the older --synthetic stream; `source` names it.
StatusOr<RoutingTrace> load_routing(SimulateFlags& f, const ExpertGeometry& g, uint32_t top_k, std::string& source) {
  const int given = !f.trace.empty() + f.synthetic + !f.routing.empty();
  if (given != 1) return invalid_argument("give exactly one of --trace FILE, --routing synth:...|trace:FILE and --synthetic");
  std::vector<uint32_t> block_of;
  for (const LayerExpertGeometry& l : g.layers) block_of.push_back(l.layer);  // MoE index -> block index
  if (f.synthetic) {
    if (f.synth.n_tokens == 0) return invalid_argument("--tokens must be at least 1");
    if (f.synth.skew < 0 || f.synth.locality < 0 || f.synth.locality > 1) {
      return invalid_argument("--skew must be >= 0 and --locality in [0, 1]");
    }
    f.synth.n_layers = static_cast<uint32_t>(g.layers.size());
    f.synth.n_expert = g.n_expert;
    f.synth.top_k = top_k;
    RoutingTrace trace = synthetic_trace(f.synth);
    for (RoutingEvent& e : trace.events) e.layer = block_of[e.layer];
    for (uint32_t& l : trace.layers) l = block_of[l];
    source = "synthetic";
    return trace;
  }
  std::string path = f.trace;
  if (!f.routing.empty()) {
    MT_ASSIGN_OR_RETURN(RoutingSource src, parse_routing_source(f.routing));
    if (src.synthetic) {
      RoutingGenParams& p = src.gen.params;
      if (src.gen.geometry_given && (p.n_expert != g.n_expert || p.top_k != top_k)) {
        return invalid_argument("--routing: the stream is for " + std::to_string(p.n_expert) + " experts top-" +
                                std::to_string(p.top_k) + ", the model has " + std::to_string(g.n_expert) + " top-" +
                                std::to_string(top_k));
      }
      p.n_layers = static_cast<uint32_t>(g.layers.size());
      p.n_expert = g.n_expert;
      p.top_k = top_k;
      MT_RETURN_IF_ERROR(check_routing_gen_params(p));
      source = routing_gen_spec_string(src.gen);
      return generate_trace(p, src.gen.tokens, block_of);
    }
    path = src.path;
  }
  source = path;
  return read_routing_trace(path);
}

// --sweep-budgets: the hit rate of each policy at each budget, as a table or JSON.
int sweep(const SimulateFlags& f, const gguf::GgufFile& file, const RoutingTrace& trace, const std::string& source) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string text = "budget     slots/layer";
  for (const std::string& p : f.sweep_policies) text += "  " + std::string(10 - std::min<size_t>(10, p.size()), ' ') + p;
  text += "\n";
  for (const std::string& budget : f.sweep_budgets) {
    nlohmann::ordered_json row = {{"budget", budget}};
    nlohmann::ordered_json rates = nlohmann::ordered_json::object();
    char head[64] = "";
    for (const std::string& policy : f.sweep_policies) {
      TieringFlags t = f.tiering;
      t.expert_cache = budget;
      t.policy = policy;
      auto setup = make_tiering_setup(file, t);
      if (!setup.ok()) return fail("simulate", setup.status());
      if (Status st = apply_device_defaults(t, f.device == "cuda", *setup); !st.ok()) return fail("simulate", st);
      const ExpertGeometry& g = setup->geometry;
      ExpertScheduler scheduler(g, setup->plan, g.layers.back().layer + 1, setup->cache, setup->scheduler);
      auto traffic = replay_trace(trace, scheduler, g.n_expert);
      if (!traffic.ok()) return fail("simulate", traffic.status());
      const double rate = stats_totals(scheduler).hit_rate;
      rates[policy] = rate;
      if (head[0] == 0) {
        uint64_t slots = 0;
        for (const ExpertPool& pool : setup->plan.pools) slots += pool.slots;
        const double per_layer = static_cast<double>(slots) / static_cast<double>(g.layers.size());
        row["budget_bytes"] = setup->budget;
        row["slots_per_layer"] = per_layer;
        std::snprintf(head, sizeof head, "%-10s %11.1f", budget.c_str(), per_layer);
      }
    }
    text += head;
    for (const std::string& p : f.sweep_policies) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "  %10.3f", rates[p].get<double>());
      text += cell;
    }
    text += "\n";
    row["hit_rate"] = rates;
    rows.push_back(row);
  }
  if (f.json) {
    nlohmann::ordered_json j = {{"routing", source}, {"steps", trace.n_steps}, {"tokens", trace.n_tokens}, {"sweep", rows}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("routing: %s (%llu steps); hit rate by budget and policy\n%s", source.c_str(),
                static_cast<unsigned long long>(trace.n_steps), text.c_str());
  }
  return 0;
}

int run(SimulateFlags f) {
  if (f.sweep_budgets.empty() && f.tiering.expert_cache.empty()) {
    return fail("simulate", invalid_argument("--expert-cache SIZE|N% is required (or --sweep-budgets)"));
  }
  if (!f.sweep_budgets.empty() && !f.tiering.expert_cache.empty()) {
    return fail("simulate", invalid_argument("give --expert-cache or --sweep-budgets, not both"));
  }
  auto file = gguf::GgufFile::open(f.model);
  if (!file.ok()) return fail("simulate", file.status());
  auto sizes = read_model_sizes(*file);
  if (!sizes.ok()) return fail("simulate", sizes.status());
  auto geometry = read_expert_geometry(*file);
  if (!geometry.ok()) return fail("simulate", geometry.status());
  if (geometry->layers.empty()) return fail("simulate", invalid_argument(f.model + " has no expert layers"));
  std::string source;
  auto routing = load_routing(f, *geometry, sizes->n_expert_used, source);
  if (!routing.ok()) return fail("simulate", routing.status());
  const RoutingTrace& trace = *routing;
  if (!f.sweep_budgets.empty()) return sweep(f, *file, trace, source);

  auto setup = make_tiering_setup(*file, f.tiering);
  if (!setup.ok()) return fail("simulate", setup.status());
  // The defaults of the device replayed for (the admission cap, the split of misses).
  if (Status st = apply_device_defaults(f.tiering, f.device == "cuda", *setup); !st.ok()) return fail("simulate", st);
  const ExpertGeometry& g = setup->geometry;
  const uint32_t n_blocks = g.layers.back().layer + 1;
  // auto (without the frequency policy's own flags): the best of the candidates on the
  // warm-up window.
  nlohmann::ordered_json auto_pick;
  std::string auto_text;
  if (picks_policy_by_measurement(f.tiering)) {
    const StudySetup study{&g, &setup->plan, n_blocks, setup->cache, setup->scheduler};
    auto pick = pick_policy_by_warmup(trace, f.warmup, study, kAutoPolicyCandidates);
    if (!pick.ok()) return fail("simulate", pick.status());
    setup->policy = setup->cache.policy = pick->policy;
    auto_pick = {{"picked", cache_policy_name(pick->policy)}, {"warmup_steps", pick->warmup_steps}};
    for (const PolicyTrial& t : pick->trials) auto_pick["warmup_hit_rate"][cache_policy_name(t.policy)] = t.hit_rate;
    auto_text = policy_pick_text(*pick) + "\n";
  }
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
    j["trace"] = {{"source", source}, {"steps", trace.n_steps}, {"tokens", trace.n_tokens},
                  {"decode_tokens", traffic->decode_tokens}};
    if (!auto_pick.is_null()) j["policy_auto"] = auto_pick;
    j["hw_profile_source"] = hw.source;
    j["predicted"] = predicted;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s%s", auto_text.c_str(), stats_text(scheduler, setup->policy, setup->budget).c_str());
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
  app.add_option("--routing", f->routing,
                 "routing to replay: synth:KEY=VALUE,... (preset=qwen3-30b|256|512, reuse, window, within, skew, seed, "
                 "tokens; a generator with temporal locality) or trace:FILE");
  app.add_flag("--synthetic", f->synthetic, "a synthetic Zipf routing stream with temporal locality instead");
  app.add_option("--tokens", f->synth.n_tokens, "synthetic: decode tokens (default 512)");
  app.add_option("--skew", f->synth.skew, "synthetic: Zipf exponent of expert popularity (default 1)");
  app.add_option("--locality", f->synth.locality, "synthetic: chance a pick repeats the previous token's (default 0.5)");
  app.add_option("--seed", f->synth.seed, "synthetic: random seed (default 1)");
  add_tiering_flags(app, &f->tiering);
  app.add_option("--warmup", f->warmup, "--cache-policy auto: steps replayed under each candidate before the pick, rated over their second half (default 128)");
  app.add_option("--sweep-budgets", f->sweep_budgets, "instead of --expert-cache: a table of hit rate per budget (10%,25%,...)")
      ->delimiter(',');
  app.add_option("--sweep-policies", f->sweep_policies, "with --sweep-budgets: the policies compared (default lru,frequency,lru2)")
      ->delimiter(',');
  app.add_option("--device", f->device,
                 "the defaults of which run to replay: cpu (the simulated device; default) or cuda (2 admissions "
                 "per layer-step, the split of misses on)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", f->json, "JSON (the schema of run --stats-json, plus trace and predicted)");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
