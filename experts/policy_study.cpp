// Policy study: replays under each candidate policy (policy_study.h).
#include "experts/policy_study.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "experts/replay.h"
#include "experts/stats.h"

namespace mt {

RoutingTrace step_range(const RoutingTrace& trace, uint64_t first, uint64_t count) {
  RoutingTrace t;
  t.top_k = trace.top_k;
  t.n_expert = trace.n_expert;
  t.layers = trace.layers;
  uint64_t index = 0, last = 0;  // index: 1 + the step ordinal of the current event
  for (const RoutingEvent& e : trace.events) {
    if (index == 0 || e.step != last) {
      ++index;
      last = e.step;
    }
    if (index <= first) continue;
    if (index > first + count) break;
    t.events.push_back(e);
    if (t.events.size() == 1 || t.events[t.events.size() - 2].step != e.step) ++t.n_steps;
  }
  std::vector<std::pair<uint64_t, uint32_t>> tokens;  // distinct (step, pos)
  for (const RoutingEvent& e : t.events) tokens.emplace_back(e.step, e.pos);
  std::sort(tokens.begin(), tokens.end());
  t.n_tokens = static_cast<uint64_t>(std::unique(tokens.begin(), tokens.end()) - tokens.begin());
  return t;
}

StatusOr<std::vector<PolicyTrial>> compare_policies(const RoutingTrace& trace, const StudySetup& setup,
                                                    std::span<const CachePolicy> candidates, uint64_t skip) {
  const RoutingTrace fill = step_range(trace, 0, skip);
  const RoutingTrace measured = step_range(trace, skip, ~uint64_t{0} - skip);
  std::vector<PolicyTrial> out;
  for (CachePolicy p : candidates) {
    CacheOptions co = setup.cache;
    co.policy = p;
    ExpertScheduler sched(*setup.geometry, *setup.plan, setup.n_layer_blocks, co, setup.scheduler);
    MT_RETURN_IF_ERROR(replay_trace(fill, sched, setup.geometry->n_expert).status());
    const CacheCounters before = stats_totals(sched).cache;
    MT_RETURN_IF_ERROR(replay_trace(measured, sched, setup.geometry->n_expert).status());
    const CacheCounters after = stats_totals(sched).cache;
    const uint64_t hits = after.hits - before.hits, lookups = hits + after.misses - before.misses;
    out.push_back({p, lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0});
  }
  return out;
}

StatusOr<PolicyPick> pick_policy_by_warmup(const RoutingTrace& trace, uint64_t warmup_steps, const StudySetup& setup,
                                           std::span<const CachePolicy> candidates) {
  if (candidates.empty()) return invalid_argument("pick_policy_by_warmup: no candidate policies");
  PolicyPick pick;
  const RoutingTrace warm = step_range(trace, 0, warmup_steps);
  pick.warmup_steps = warm.n_steps;
  MT_ASSIGN_OR_RETURN(pick.trials, compare_policies(warm, setup, candidates, warm.n_steps / 2));
  double best = -1;
  for (const PolicyTrial& t : pick.trials) {
    if (t.hit_rate > best) best = t.hit_rate, pick.policy = t.policy;
  }
  return pick;
}

std::string policy_pick_text(const PolicyPick& pick) {
  std::string line = std::string("policy auto: ") + cache_policy_name(pick.policy) + " (hit rates over the first " +
                     std::to_string(pick.warmup_steps) + " steps:";
  for (const PolicyTrial& t : pick.trials) {
    char cell[48];
    std::snprintf(cell, sizeof cell, " %s %.3f", cache_policy_name(t.policy), t.hit_rate);
    line += cell;
  }
  return line + ")";
}

}  // namespace mt
