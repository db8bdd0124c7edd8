// Policy study: the same routing replayed through one expert cache per replacement policy
// (experts/cache.h), to compare their hit rates and to pick one by measurement. `simulate
// --cache-policy auto` replays the stream's first steps (the warm-up window) under each
// candidate and keeps the one with the best hit rate over the window's second half (the
// first half fills the cache: a policy that admits late, like frequency, is not judged on
// its cold start; ties: the earlier candidate), the way an engine could decide after its
// first tokens; `simulate --sweep-budgets` tabulates hit rate
// against budget per policy (docs/PERFORMANCE.md, "Routing with temporal locality").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "experts/cache.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "experts/routing_trace.h"
#include "experts/scheduler.h"

namespace mt {

// Everything but the policy that a replay needs.
struct StudySetup {
  const ExpertGeometry* geometry = nullptr;
  const PoolPlan* plan = nullptr;
  uint32_t n_layer_blocks = 0;
  CacheOptions cache;  // its policy is replaced by each candidate
  SchedulerOptions scheduler;
};

struct PolicyTrial {
  CachePolicy policy = CachePolicy::kLru;
  double hit_rate = 0;
};

// The trace's events of its steps [first, first + count) in step order (fewer when it ends).
RoutingTrace step_range(const RoutingTrace& trace, uint64_t first, uint64_t count);

// Hit rate of each candidate over the trace's steps from `skip` on (the steps before fill
// the cache), in the candidates' order.
StatusOr<std::vector<PolicyTrial>> compare_policies(const RoutingTrace& trace, const StudySetup& setup,
                                                    std::span<const CachePolicy> candidates, uint64_t skip = 0);

// The policies `--cache-policy auto` chooses among, in tie order.
inline constexpr CachePolicy kAutoPolicyCandidates[] = {CachePolicy::kLru, CachePolicy::kFrequency, CachePolicy::kLru2};

struct PolicyPick {
  CachePolicy policy = CachePolicy::kLru;
  uint64_t warmup_steps = 0;
  std::vector<PolicyTrial> trials;
};
// "policy auto: lru (hit rates over the first 128 steps: lru 0.600 frequency 0.510 lru2 0.562)".
std::string policy_pick_text(const PolicyPick& pick);
// The candidate with the best hit rate over steps warmup_steps / 2 .. warmup_steps.
StatusOr<PolicyPick> pick_policy_by_warmup(const RoutingTrace& trace, uint64_t warmup_steps, const StudySetup& setup,
                                           std::span<const CachePolicy> candidates);

}  // namespace mt
