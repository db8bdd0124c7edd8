// Replay: a routing trace through an ExpertScheduler in the order the executor meets it:
// step by step, each step's MoE layers in ascending block order, each layer's distinct
// experts with their token counts. Fed a run's own record (`run --record-routing`), the
// scheduler ends with exactly the counters the run's scheduler had.
//
// The decode traffic (summed over single-token steps, the ones decode speed is about) is
// what the cost model needs to predict each mode from the same cache behaviour: bytes of
// the selected experts, of the hits, of the misses, of the misses the policy admitted.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "experts/routing_trace.h"
#include "experts/scheduler.h"

namespace mt {

struct ReplayTraffic {
  uint64_t decode_tokens = 0;
  double expert_bytes = 0, hit_bytes = 0, miss_bytes = 0, admitted_bytes = 0;
};

// Errors: a trace layer without experts in the model, an expert id out of range.
StatusOr<ReplayTraffic> replay_trace(const RoutingTrace& trace, ExpertScheduler& scheduler, uint32_t n_expert);

// Per-token traffic of each mode for the cost model, from the replayed decode traffic:
// stream copies every miss (admitted into a slot or staged); hybrid computes the misses
// on the CPU and copies the admitted ones alongside; cpu reads every expert on the host.
DecodeTraffic decode_traffic(const ReplayTraffic& r, MoeMode mode, double dense_bytes, double shared_bytes,
                             uint32_t n_moe_layers, QuantType expert_type);

}  // namespace mt
