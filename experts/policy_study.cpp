// Policy study: replays under each candidate policy (policy_study.h).
#include "experts/policy_study.h"

#include <algorithm>
#include <utility>

#include "experts/replay.h"
#include "experts/stats.h"

namespace mt {

RoutingTrace first_steps(const RoutingTrace& trace, uint64_t steps) {
  RoutingTrace t;
  t.top_k = trace.top_k;
  t.n_expert = trace.n_expert;
  t.layers = trace.layers;
  uint64_t seen = 0, last = 0;
  for (const RoutingEvent& e : trace.events) {
    if (seen == 0 || e.step != last) {
      if (seen == steps) break;
      ++seen;
      last = e.step;
    }
    t.events.push_back(e);
  }
  t.n_steps = seen;
  std::vector<std::pair<uint64_t, uint32_t>> tokens;  // distinct (step, pos)
  for (const RoutingEvent& e : t.events) tokens.emplace_back(e.step, e.pos);
  std::sort(tokens.begin(), tokens.end());
  t.n_tokens = static_cast<uint64_t>(std::unique(tokens.begin(), tokens.end()) - tokens.begin());
  return t;
}

StatusOr<std::vector<PolicyTrial>> compare_policies(const RoutingTrace& trace, const StudySetup& setup,
                                                    std::span<const CachePolicy> candidates) {
  std::vector<PolicyTrial> out;
  for (CachePolicy p : candidates) {
    CacheOptions co = setup.cache;
    co.policy = p;
    ExpertScheduler sched(*setup.geometry, *setup.plan, setup.n_layer_blocks, co, setup.scheduler);
    MT_RETURN_IF_ERROR(replay_trace(trace, sched, setup.geometry->n_expert).status());
    out.push_back({p, stats_totals(sched).hit_rate});
  }
  return out;
}

StatusOr<PolicyPick> pick_policy_by_warmup(const RoutingTrace& trace, uint64_t warmup_steps, const StudySetup& setup,
                                           std::span<const CachePolicy> candidates) {
  if (candidates.empty()) return invalid_argument("pick_policy_by_warmup: no candidate policies");
  PolicyPick pick;
  const RoutingTrace warm = first_steps(trace, warmup_steps);
  pick.warmup_steps = warm.n_steps;
  MT_ASSIGN_OR_RETURN(pick.trials, compare_policies(warm, setup, candidates));
  double best = -1;
  for (const PolicyTrial& t : pick.trials) {
    if (t.hit_rate > best) best = t.hit_rate, pick.policy = t.policy;
  }
  return pick;
}

}  // namespace mt
