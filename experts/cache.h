// Expert cache: the slots of a PoolPlan (experts/pools.h) and which expert each holds.
//
// Every MoE layer owns its share of its geometry pool's slots (a contiguous run of the
// pool, so the device address of a slot is pool base + index * expert bytes). Per layer,
// expert_to_slot says where an expert lives (-1: not resident) and the slots say back
// which expert they hold. A lookup counts a hit or a miss; on a miss, admit() asks the
// layer's replacement policy whether to bring the expert in (and which resident expert it
// evicts) or to leave it to the CPU. Policies:
//   LRU:        always admit; evict the least recently used.
//   frequency:  admit an expert only once it has been requested `admit_after` times
//               (hysteresis), evict the resident expert with the fewest requests among
//               those resident for at least `min_dwell` steps; none old enough: no admit.
//   static-hot: admit only the layer's hot experts (a popularity profile), never evict.
//   lru2:       LRU-K with K = 2 (recency and frequency): always admit; evict the resident
//               expert whose second most recent request is oldest, an expert requested in
//               one step only counting as never (so it goes first; ties: least recently
//               used). Requests are counted per step (one step's lookups of an expert are
//               one reference) and remembered for evicted experts too, so an expert that
//               comes back within a few tokens is protected and a one-off pick is not:
//               under routing with temporal locality (experts/routing_gen.h) the one-off
//               fresh picks go before the experts that keep returning.
// invalidate_layer() empties a layer (a prefill overlay overwrote its slots). Counters per
// layer: hits, misses, admissions, evictions, bytes copied in. An expert looked up or
// admitted in the current step (next_step() advances it) is never the victim: a step's
// hits are read from their slots while its misses are admitted.
#pragma once

#include <cstdint>
#include <vector>

#include "experts/pools.h"

namespace mt {

enum class CachePolicy { kLru, kFrequency, kStaticHot, kLru2 };

struct CacheOptions {
  CachePolicy policy = CachePolicy::kLru;
  uint32_t admit_after = 2;       // frequency: requests before admission
  uint64_t min_dwell = 4;         // frequency: steps before a resident expert may be evicted
  // static-hot: per layer (block index -> its hot experts, most popular first).
  std::vector<std::vector<uint32_t>> hot;
};

struct CacheCounters {
  uint64_t hits = 0, misses = 0, admissions = 0, evictions = 0, bytes_copied = 0;
};

// Where a layer's slots are: pool index and first slot in the pool.
struct LayerSlots {
  int32_t pool = -1;
  uint64_t first = 0;
  uint32_t count = 0;
  uint64_t expert_bytes = 0;  // the slot stride
  uint64_t copy_bytes = 0;    // one expert of the layer (what an admission copies; <= the stride)
};

class ExpertCache {
 public:
  // plan's layers are block indices < n_layer_blocks; n_expert per layer.
  ExpertCache(const PoolPlan& plan, uint32_t n_layer_blocks, uint32_t n_expert, CacheOptions options);

  // Slot (within the layer's run) holding the expert, or -1; counts a hit or a miss and
  // marks the expert used at the current step.
  int32_t lookup(uint32_t layer, uint32_t expert);
  // After a miss: the slot to copy the expert into (its previous expert evicted), or -1
  // when the policy leaves it to the CPU.
  int32_t admit(uint32_t layer, uint32_t expert);
  void invalidate_layer(uint32_t layer);
  void next_step() { ++step_; }

  size_t n_layers() const { return layers_.size(); }
  const LayerSlots& slots(uint32_t layer) const { return layers_[layer].where; }
  const CacheCounters& counters(uint32_t layer) const { return layers_[layer].counters; }
  int32_t slot_of(uint32_t layer, uint32_t expert) const { return layers_[layer].expert_to_slot[expert]; }
  int32_t expert_in(uint32_t layer, uint32_t slot) const { return layers_[layer].slot_expert[slot]; }

 private:
  struct Layer {
    LayerSlots where;
    std::vector<int32_t> expert_to_slot, slot_expert;
    std::vector<uint64_t> last_use, resident_since;  // per slot
    std::vector<uint32_t> requests;                  // per expert
    std::vector<uint64_t> ref_last, ref_prev;        // per expert (lru2): 1 + the step of its last / previous reference; 0: none
    std::vector<uint8_t> hot;                        // per expert (static-hot)
    CacheCounters counters;
  };
  int32_t victim(const Layer& l) const;

  CacheOptions options_;
  std::vector<Layer> layers_;
  uint64_t step_ = 0;
};

}  // namespace mt
