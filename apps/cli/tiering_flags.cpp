#include "apps/cli/tiering_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "apps/cli/model_sizes.h"
#include "apps/cli/sizes.h"
#include "core/log.h"
#include "experts/planner.h"
#include "experts/popularity.h"
#include "experts/stats.h"

namespace mt::cli {

void add_tiering_flags(CLI::App& app, TieringFlags* f) {
  app.add_option("--expert-cache", f->expert_cache,
                 "expert cache budget on the (simulated) device: SIZE (8640MiB, 2GiB) or N% of all expert bytes");
  app.add_option_function<int64_t>(
         "--n-cpu-moe",
         [f](int64_t n) {
           f->n_cpu_moe = n;
           if (f->expert_cache.empty()) f->expert_cache = kNCpuMoe;
         },
         "llama.cpp's placement: the experts of the first N layers in host memory (the CPU computes them), all "
         "others kept on the (simulated) device; instead of --expert-cache")
      ->type_name("N");
  app.add_option("--cache-policy", f->policy,
                 "expert cache replacement: lru, frequency, static-hot, lru2 (LRU-2: recency and frequency), auto (default: with --routing the "
                 "best of lru, frequency and lru2 over the stream's first 128 tokens; else frequency with --device "
                 "cuda, lru on the CPU)");
  app.add_option("--cache-layout", f->layout,
                 "expert cache slots: pools (exact size per geometry, default) or unified (every slot the largest expert's size)");
  app.add_option("--admit-after", f->admit_after,
                 "frequency policy: requests before an expert is admitted (default: 1 with --device cuda, else 2)");
  app.add_option("--min-dwell", f->min_dwell,
                 "frequency policy: steps a resident expert stays before eviction (default: 1 with --device cuda, else 4)");
  app.add_option("--popularity", f->popularity, "popularity profile (moetier profile) for static-hot");
  app.add_option("--moe-mode", f->moe_mode,
                 "where cache misses run: hybrid (CPU), stream (copied in), cpu, auto (the planner's pick of stream "
                 "or hybrid from the hardware profile)");
  app.add_option("--max-admissions", f->max_admissions,
                 "hybrid: expert admissions per layer-step at most (0: no cap; default: none on the CPU, 2 with "
                 "--device cuda)");
  app.add_option("--hw-profile", f->hw_profile, "hardware profile JSON (moetier hwprofile) for the cost model");
  app.add_option("--split-misses", f->split_misses,
                 "hybrid: copy part of each layer-step's misses to the device and compute them there while the CPU "
                 "computes the rest: auto (on with --device cuda), on, off");
  app.add_option("--split-fraction", f->split_fraction,
                 "with --split-misses: the device's share of the misses, 0..1 (default: from the hardware profile)");
  app.add_option("--split-pick", f->split_pick,
                 "with --split-misses: which misses of equal tokens go to the device: popular (the most selected so "
                 "far; default) or ids (ascending expert ids)")
      ->check(CLI::IsMember({"popular", "ids"}));
  app.add_option("--split-learn", f->split_learn,
                 "with --split-misses: the CPU's and the device's costs of their shares learned from the measured "
                 "layer-steps while running (auto: on with --device cuda), or (off) taken from the hardware profile")
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

bool picks_policy_by_measurement(const TieringFlags& f) {
  return f.policy == "auto" && f.n_cpu_moe < 0 && f.admit_after == 0 && f.min_dwell == 0;
}

Status apply_device_defaults(const TieringFlags& f, bool gpu, TieringSetup& s) {
  if (f.max_admissions < 0 && gpu) s.scheduler.max_admissions = kGpuMaxAdmissions;
  if (gpu && f.policy == "auto" && f.n_cpu_moe < 0) s.policy = s.cache.policy = CachePolicy::kFrequency;
  if (gpu && s.cache.policy == CachePolicy::kFrequency) {
    if (f.admit_after == 0) s.cache.admit_after = kGpuAdmitAfter;
    if (f.min_dwell == 0) s.cache.min_dwell = kGpuMinDwell;
  }
  if ((f.admit_after > 0 || f.min_dwell > 0) && s.cache.policy != CachePolicy::kFrequency) {
    return invalid_argument(std::string("--admit-after and --min-dwell are read by the frequency policy only (the policy here is ") +
                            cache_policy_name(s.cache.policy) + ")");
  }
  if (f.split_misses == "auto") {
    s.scheduler.split_misses = gpu && s.scheduler.mode == MoeMode::kHybrid;
  } else if (f.split_misses == "on" || f.split_misses == "off") {
    s.scheduler.split_misses = f.split_misses == "on";
  } else {
    return invalid_argument("--split-misses: '" + f.split_misses + "' is not auto, on or off");
  }
  if (f.split_fraction > 1.0) return invalid_argument("--split-fraction: " + std::to_string(f.split_fraction) + " is above 1");
  if (f.split_fraction >= 0 && !s.scheduler.split_misses) {
    return invalid_argument("--split-fraction needs the split of misses (--split-misses on, or auto on cuda)");
  }
  s.scheduler.split_fraction = f.split_fraction;
  // The learned costs move the split with timing: only where a real device runs it.
  s.scheduler.learn_costs = s.scheduler.split_misses && f.split_fraction < 0 &&
                               (f.split_learn == "on" || (f.split_learn == "auto" && gpu));
  s.scheduler.split_popular_first = f.split_pick != "ids";
  return {};
}

void add_bank_flags(CLI::App& app, BankFlags* f) {
  app.add_option("--pin-budget", f->pin_budget,
                 "with --expert-cache: host memory for pinned copies of expert layers (default: 0 on the CPU, all with "
                 "--device cuda)");
  app.add_option("--pin-limit", f->pin_limit,
                 "with --expert-cache: refuse pinned allocations past SIZE, as a driver may (the layers stay pageable)");
  app.add_flag("--pin-background", f->pin_background,
               "with --expert-cache on cuda: pin the expert layers on a thread of their own while the first tokens "
               "copy from pageable memory (each layer switches to its pinned copy when complete)");
  app.add_option("--stream-threshold", f->stream_threshold,
                 "with --expert-cache on cuda: prefill batches of at least N tokens stream the expert banks (0: never)");
}

StatusOr<BankOptions> resolve_bank_flags(const BankFlags& f, bool gpu) {
  BankOptions o;
  o.gpu = gpu;
  o.stream_threshold = f.stream_threshold;
  if (f.pin_background && !gpu) {
    return invalid_argument("--pin-background pins the host banks for the GPU's copies: it needs --device cuda");
  }
  o.pin_background = f.pin_background;
  if (f.pin_budget.empty()) {
    o.pin_budget = gpu ? ~uint64_t{0} : 0;
  } else {
    MT_ASSIGN_OR_RETURN(o.pin_budget, parse_size(f.pin_budget, "--pin-budget"));
  }
  if (!f.pin_limit.empty()) {
    MT_ASSIGN_OR_RETURN(o.pin_limit, parse_size(f.pin_limit, "--pin-limit"));
  }
  return o;
}

namespace {

// The flags read the same way for a budget and for --n-cpu-moe: the admission cap, the
// hardware profile and the mode.
StatusOr<TieringSetup> finish_setup(const gguf::GgufFile& file, const TieringFlags& f, TieringSetup& s) {
  if (f.max_admissions > 0) s.scheduler.max_admissions = static_cast<uint32_t>(f.max_admissions);
  if (!f.hw_profile.empty()) {
    MT_ASSIGN_OR_RETURN(s.scheduler.hw, read_hw_profile(f.hw_profile));
  }
  if (f.moe_mode == "hybrid") s.scheduler.mode = MoeMode::kHybrid;
  else if (f.moe_mode == "stream") s.scheduler.mode = MoeMode::kStream;
  else if (f.moe_mode == "cpu") s.scheduler.mode = MoeMode::kCpu;
  else if (f.moe_mode == "auto") {
    // The planner's choice (experts/planner.h) for this cache budget and hardware profile:
    // the fastest predicted mode among those that use the device.
    PlanInputs in;
    in.geometry = s.geometry;
    MT_ASSIGN_OR_RETURN(in.model, read_model_sizes(file));
    in.expert_cache_bytes = s.budget;
    in.device_bytes = ~uint64_t{0} >> 2;  // the budget is given: device size only gates fitting
    in.host_bytes = ~uint64_t{0} >> 2;
    in.hw = s.scheduler.hw;
    in.ctx = 4096;
    MT_ASSIGN_OR_RETURN(Plan plan, make_plan(in));
    s.scheduler.mode = MoeMode::kHybrid;
    double best = -1;
    for (const ModePlan& m : plan.modes) {
      if (m.mode == MoeMode::kCpu || !m.available) continue;
      if (m.predicted.tokens_per_s > best) best = m.predicted.tokens_per_s, s.scheduler.mode = m.mode;
    }
    s.auto_mode = true;
  } else {
    return invalid_argument("--moe-mode: '" + f.moe_mode + "' is not auto, hybrid, stream or cpu");
  }
  return s;
}

// --n-cpu-moe N: one pool per geometry group whose later blocks (>= N) get a slot for every
// expert and the first N none; static-hot over every expert of the later blocks keeps them.
Status place_n_cpu_moe(const TieringFlags& f, TieringSetup& s) {
  if (f.expert_cache != kNCpuMoe) return invalid_argument("give --n-cpu-moe N or --expert-cache SIZE, not both");
  if (f.n_cpu_moe < 0) return invalid_argument("--n-cpu-moe " + std::to_string(f.n_cpu_moe) + ": must be >= 0");
  if (f.policy != "auto" || !f.popularity.empty() || f.layout != "pools") {
    return invalid_argument("--n-cpu-moe places the experts itself: drop --cache-policy, --popularity and --cache-layout");
  }
  const auto first_device = static_cast<uint64_t>(f.n_cpu_moe);
  uint32_t max_block = 0;
  for (const LayerExpertGeometry& l : s.geometry.layers) max_block = std::max(max_block, l.layer);
  s.cache.hot.assign(max_block + 1, {});
  s.plan = plan_pools(s.geometry, 0);  // the pools' layers and slot sizes, no slots yet
  for (ExpertPool& pool : s.plan.pools) {
    pool.slots = 0;
    for (size_t i = 0; i < pool.layers.size(); ++i) {
      const bool device = pool.layers[i] >= first_device;
      pool.slots_per_layer[i] = device ? s.geometry.n_expert : 0;
      pool.slots += pool.slots_per_layer[i];
      if (!device) continue;
      std::vector<uint32_t>& hot = s.cache.hot[pool.layers[i]];
      for (uint32_t e = 0; e < s.geometry.n_expert; ++e) hot.push_back(e);
    }
  }
  s.budget = s.plan.budget = s.plan.used_bytes();
  s.policy = s.cache.policy = CachePolicy::kStaticHot;
  log_debug("--n-cpu-moe " + std::to_string(f.n_cpu_moe) + ": " + human_bytes(s.budget) + " of experts on the device");
  return {};
}

}  // namespace

StatusOr<TieringSetup> make_tiering_setup(const gguf::GgufFile& file, const TieringFlags& f) {
  TieringSetup s;
  MT_ASSIGN_OR_RETURN(s.geometry, read_expert_geometry(file));
  if (s.geometry.layers.empty()) {
    return invalid_argument(f.n_cpu_moe >= 0 ? "--n-cpu-moe: the model has no expert layers"
                                             : "--expert-cache: the model has no expert layers");
  }
  if (f.n_cpu_moe >= 0 || f.expert_cache == kNCpuMoe) {
    MT_RETURN_IF_ERROR(place_n_cpu_moe(f, s));
    return finish_setup(file, f, s);
  }
  MT_ASSIGN_OR_RETURN(s.budget, parse_size_or_percent(f.expert_cache, s.geometry.compact_bytes, "--expert-cache"));
  if (f.layout == "pools") {
    s.plan = plan_pools(s.geometry, s.budget);
  } else if (f.layout == "unified") {
    s.plan = plan_unified_pool(s.geometry, s.budget);
  } else {
    return invalid_argument("--cache-layout: '" + f.layout + "' is not pools or unified");
  }
  if (f.policy == "lru" || f.policy == "auto") s.policy = CachePolicy::kLru;  // auto: see apply_device_defaults
  else if (f.policy == "frequency") s.policy = CachePolicy::kFrequency;
  else if (f.policy == "static-hot") s.policy = CachePolicy::kStaticHot;
  else if (f.policy == "lru2") s.policy = CachePolicy::kLru2;
  else return invalid_argument("--cache-policy: '" + f.policy + "' is not lru, frequency, static-hot, lru2 or auto");
  s.cache.policy = s.policy;
  s.cache.admit_after = f.admit_after > 0 ? f.admit_after : kAdmitAfter;
  s.cache.min_dwell = f.min_dwell > 0 ? f.min_dwell : kMinDwell;
  if (s.policy == CachePolicy::kStaticHot) {
    if (f.popularity.empty()) return invalid_argument("--cache-policy static-hot needs --popularity FILE (moetier profile)");
    MT_ASSIGN_OR_RETURN(PopularityProfile p, read_popularity(f.popularity));
    if (p.n_expert != s.geometry.n_expert) {
      return invalid_argument("--popularity: the profile has " + std::to_string(p.n_expert) + " experts per layer, the model " +
                              std::to_string(s.geometry.n_expert));
    }
    uint32_t max_block = 0;
    for (const LayerExpertGeometry& l : s.geometry.layers) max_block = std::max(max_block, l.layer);
    s.cache.hot.assign(max_block + 1, {});
    for (const ExpertPool& pool : s.plan.pools) {
      for (size_t i = 0; i < pool.layers.size(); ++i) {
        const uint32_t b = pool.layers[i];
        if (b >= p.counts.size() || p.counts[b].empty()) continue;
        std::vector<uint32_t> ranked = p.ranked(b);
        ranked.resize(std::min<size_t>(ranked.size(), pool.slots_per_layer[i]));
        s.cache.hot[b] = std::move(ranked);
      }
    }
  } else if (!f.popularity.empty()) {
    return invalid_argument("--popularity is read by --cache-policy static-hot only");
  }
  return finish_setup(file, f, s);
}

StatusOr<ResolvedTiering> resolve_tiering(const gguf::GgufFile& file, const TieringFlags& f, const BankFlags& banks,
                                          bool gpu) {
  ResolvedTiering r;
  MT_ASSIGN_OR_RETURN(r.setup, make_tiering_setup(file, f));
  MT_ASSIGN_OR_RETURN(r.banks, resolve_bank_flags(banks, gpu));
  MT_RETURN_IF_ERROR(apply_device_defaults(f, r.banks.gpu, r.setup));
  return r;
}

}  // namespace mt::cli
