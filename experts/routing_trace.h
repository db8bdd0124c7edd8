// Routing traces: which experts each MoE layer selected for each token, as written by
// `moetier run --record-routing` / `logits --routing` (JSON lines
//   {"layer": L, "pos": P, "step": S, "experts": [...], "weights": [...]}
// where step numbers the forward calls: a prompt batch is one step, each decoded token
// one more; lines without "step" count each position as its own step), or made up by
// synthetic_trace(): Zipf popularity per layer, each rank repeating the previous token's
// pick with probability `locality` (the older generator behind `simulate --synthetic`;
// experts/routing_gen.h's generator, `--routing synth:`, defines and is tested for reuse,
// window and skew, and streams token by token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mt {

struct RoutingEvent {
  uint32_t layer = 0;          // block index
  uint32_t pos = 0;
  uint64_t step = 0;
  std::vector<int32_t> experts;  // top-k, in rank order
  std::vector<float> weights;    // empty when the source has none
};

struct RoutingTrace {
  std::vector<RoutingEvent> events;  // file order (steps ascending, layers ascending within a step)
  uint32_t n_expert = 0;             // 1 + the largest expert id seen
  uint32_t top_k = 0;                // experts per event (all events agree)
  std::vector<uint32_t> layers;      // distinct layers, ascending
  uint64_t n_steps = 0;
  uint64_t n_tokens = 0;             // distinct (step, pos) pairs
};

// Errors name the file and line (bad JSON, missing field, negative id, top-k changing).
// Events come out ordered by (step, layer, pos), the order moetier records them in; a
// step-less file (step = pos) is reordered. Lines must all carry "step" or all lack it.
StatusOr<RoutingTrace> read_routing_trace(const std::string& path);

struct SyntheticTraceOptions {
  uint32_t n_layers = 24;
  uint32_t n_expert = 32;
  uint32_t top_k = 8;
  uint64_t n_tokens = 512;     // decode steps, one token each
  double skew = 1.0;           // Zipf exponent of per-layer popularity (0: uniform)
  double locality = 0.5;       // chance that a rank repeats the previous token's pick
  uint64_t seed = 1;
};
// Deterministic for a seed; each layer gets its own popularity permutation.
RoutingTrace synthetic_trace(const SyntheticTraceOptions& o);

}  // namespace mt
