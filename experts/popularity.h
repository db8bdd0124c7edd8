// Popularity profiles: how often each expert of each MoE layer was selected over a set of
// prompts (`moetier profile`). The static-hot policy pins each layer's most popular
// experts; the planner predicts hit rates from the same counts.
//
// JSON: {"version": 1, "model": "...", "n_expert": E, "tokens": N,
//        "layers": [{"layer": L, "counts": [c_0, ..., c_{E-1}]}, ...]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "experts/routing_trace.h"

namespace mt {

struct PopularityProfile {
  std::string model;
  uint32_t n_expert = 0;
  uint64_t tokens = 0;
  std::vector<std::vector<uint64_t>> counts;  // [block index][expert]; empty for non-MoE blocks

  // The layer's experts, most selected first (ties: lower id first).
  std::vector<uint32_t> ranked(uint32_t layer) const;
  // Fraction of the layer's selections that fall on its `n` most popular experts.
  double coverage(uint32_t layer, uint32_t n) const;
};

PopularityProfile popularity_from_trace(const RoutingTrace& trace, uint32_t n_layer_blocks, uint32_t n_expert);
std::string popularity_to_json(const PopularityProfile& p);
StatusOr<PopularityProfile> popularity_from_json(const std::string& text);
StatusOr<PopularityProfile> read_popularity(const std::string& path);

}  // namespace mt
