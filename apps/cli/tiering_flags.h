// The expert-tiering flags shared by run, logits and simulate, and what they resolve to:
//   --expert-cache SIZE|N%   cache budget (N% of all expert bytes); absent: no offload
//   --cache-policy lru|frequency|static-hot  [--admit-after N] [--min-dwell STEPS]
//   --cache-layout pools|unified  exact-size pools, or one pool of largest-expert slots
//   --popularity FILE        a `moetier profile` JSON: static-hot's hot experts
//   --moe-mode hybrid|stream|cpu|auto  [--hw-profile FILE]  (the cost model's speeds; auto:
//                            the planner's fastest predicted device mode for the budget)
//   --split-misses auto|on|off  [--split-fraction F]  hybrid: part of each layer-step's
//                            misses copied to the device and computed there while the CPU
//                            computes the rest (auto: on with --device cuda)
//   --split-learn auto|on|off  the split's CPU and device costs learned from the measured
//                            layer-steps (auto: on with --device cuda; off: the profile's)
//   --n-cpu-moe N            llama.cpp's placement: the experts of blocks 0..N-1 stay in
//                            host memory (computed by the CPU), every expert of the later
//                            blocks has a slot in the device cache and is kept there
//                            (static-hot over all of them: never evicted); instead of
//                            --expert-cache
// static-hot keeps, per layer, the profile's most popular experts up to the layer's slots.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "experts/cache.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "experts/scheduler.h"

namespace CLI {
class App;
}

namespace mt::cli {

struct TieringFlags {
  // policy auto: lru on the CPU's simulated device, frequency (admit at once, evict the
  // least requested) with --device cuda; admit_after / min_dwell 0: the policy's default.
  std::string expert_cache, policy = "auto", moe_mode = "hybrid", popularity, hw_profile;
  std::string layout = "pools";  // --cache-layout pools|unified
  uint32_t admit_after = 0;
  uint64_t min_dwell = 0;
  int max_admissions = -1;  // per layer-step, hybrid; -1: auto (none on the CPU, 2 on the GPU)
  std::string split_misses = "auto";  // hybrid: share the CPU's misses with the link; auto: on the GPU
  double split_fraction = -1;         // the device's share (0..1); < 0: from the cost model
  std::string split_pick = "popular";  // popular | ids: which misses of equal tokens the device takes
  std::string split_learn = "auto";    // auto | on | off: learn both sides' costs while running
  int64_t n_cpu_moe = -1;  // --n-cpu-moe N (sets expert_cache to kNCpuMoe so that every command sees tiering asked for)
};
inline constexpr const char* kNCpuMoe = "(--n-cpu-moe)";

void add_tiering_flags(CLI::App& app, TieringFlags* f);

// Host expert banks (run, bench): --pin-budget SIZE (pinned copies of expert layers;
// default 0 on the CPU's simulated device, all layers with --device cuda), --pin-limit SIZE
// (pinned allocations past it are refused, as a driver may: shows the pageable fallback),
// --stream-threshold N (GPU: prefill batches of N or more tokens stream the expert banks;
// 0: never).
struct BankFlags {
  std::string pin_budget, pin_limit;
  uint32_t stream_threshold = 64;
  bool pin_background = false;
};
struct BankOptions {
  uint64_t pin_budget = 0, pin_limit = ~uint64_t{0};
  uint32_t stream_threshold = 64;
  bool pin_background = false;
  bool gpu = false;
};
// --max-admissions' default on the GPU (auto): 2 per layer-step.
inline constexpr uint32_t kGpuMaxAdmissions = 2;
// --cache-policy frequency's defaults: hysteresis on the CPU's simulated device; on the GPU
// (where the split of misses admits only what the device computes now, so a refusal means
// a staged copy of the same bytes) admit at once and let any expert resident for a step go.
inline constexpr uint32_t kAdmitAfter = 2, kGpuAdmitAfter = 1;
inline constexpr uint64_t kMinDwell = 4, kGpuMinDwell = 1;

void add_bank_flags(CLI::App& app, BankFlags* f);
StatusOr<BankOptions> resolve_bank_flags(const BankFlags& f, bool gpu);

struct TieringSetup {
  ExpertGeometry geometry;
  uint64_t budget = 0;
  PoolPlan plan;
  CachePolicy policy = CachePolicy::kLru;
  CacheOptions cache;
  SchedulerOptions scheduler;
  bool auto_mode = false;  // --moe-mode auto: scheduler.mode is the planner's pick
};

// Reads the geometry from the file and resolves every flag; errors name the flag.
StatusOr<TieringSetup> make_tiering_setup(const gguf::GgufFile& file, const TieringFlags& f);
// True when `--cache-policy auto` picks by measuring the candidates on the routing's first
// steps: auto, not --n-cpu-moe, and neither of the frequency policy's own flags given.
bool picks_policy_by_measurement(const TieringFlags& f);
// The defaults that depend on where the experts run (gpu: --device cuda, else the CPU's
// simulated device): the admission cap, the split of misses and the cache policy.
Status apply_device_defaults(const TieringFlags& f, bool gpu, TieringSetup& s);

// The three steps above in order, as run, bench and serve take them: the setup from the
// file and the flags, the banks' options, the device's defaults.
struct ResolvedTiering {
  TieringSetup setup;
  BankOptions banks;
};
StatusOr<ResolvedTiering> resolve_tiering(const gguf::GgufFile& file, const TieringFlags& f, const BankFlags& banks,
                                          bool gpu);

}  // namespace mt::cli
