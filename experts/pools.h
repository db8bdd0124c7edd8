// Expert cache pools: a byte budget carved into one pool of exact-size slots per geometry
// group (layers whose (gate, up, down) bytes per expert are equal), so a Q4_K layer's
// expert takes a Q4_K-sized slot and never an 18 MiB BF16-sized one (seed 000: the same
// 8,640 MiB give 988 Q4_K + 202 BF16 slots instead of 480 unified max-size slots).
//
// Sizing: every layer should be able to keep about the same number of its experts, so the
// budget is split in proportion to each group's cost of one slot in each of its layers
// (layers x bytes per expert); each pool takes the whole slots its share buys, and the
// rest of the budget goes one slot at a time to the pool with the fewest slots per layer
// that still fits, until no slot fits: the waste is below the smallest slot size. A pool
// never holds more slots than its layers have experts. Within a pool the slots are shared
// out evenly: every layer gets floor(slots / layers), the first (slots % layers) one more.
#pragma once

#include <cstdint>
#include <vector>

#include "experts/geometry.h"

namespace mt {

struct ExpertPool {
  uint64_t expert_bytes = 0;              // one slot (gate + up + down of one expert)
  std::vector<uint32_t> layers;           // block indices, ascending
  std::vector<uint64_t> layer_bytes;      // parallel to layers: one expert of the layer (== expert_bytes but in a unified pool)
  std::vector<uint32_t> slots_per_layer;  // parallel to layers
  uint64_t slots = 0;
  uint64_t bytes() const { return slots * expert_bytes; }
};

struct PoolPlan {
  uint64_t budget = 0;
  std::vector<ExpertPool> pools;          // as geometry.groups: by descending expert bytes
  uint64_t used_bytes() const;
};

PoolPlan plan_pools(const ExpertGeometry& geometry, uint64_t budget_bytes);
// The layout exact pools replace, for comparison (seed 000's +23%): one pool of slots the
// size of the largest expert for every layer, budget / largest slots shared out evenly;
// a smaller expert sits at the start of its slot (strided copies, the rest unused).
PoolPlan plan_unified_pool(const ExpertGeometry& geometry, uint64_t budget_bytes);

}  // namespace mt
