#include "experts/cache.h"

#include <utility>

#include "core/check.h"

namespace mt {

ExpertCache::ExpertCache(const PoolPlan& plan, uint32_t n_layer_blocks, uint32_t n_expert, CacheOptions options)
    : options_(std::move(options)), layers_(n_layer_blocks) {
  for (Layer& l : layers_) {
    l.expert_to_slot.assign(n_expert, -1);
    l.requests.assign(n_expert, 0);
    l.ref_last.assign(n_expert, 0);
    l.ref_prev.assign(n_expert, 0);
    l.hot.assign(n_expert, 0);
  }
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    const ExpertPool& pool = plan.pools[p];
    uint64_t first = 0;
    for (size_t i = 0; i < pool.layers.size(); ++i) {
      MT_CHECK(pool.layers[i] < n_layer_blocks);
      Layer& l = layers_[pool.layers[i]];
      l.where = {static_cast<int32_t>(p), first, pool.slots_per_layer[i], pool.expert_bytes,
                 i < pool.layer_bytes.size() ? pool.layer_bytes[i] : pool.expert_bytes};
      l.slot_expert.assign(pool.slots_per_layer[i], -1);
      l.last_use.assign(pool.slots_per_layer[i], 0);
      l.resident_since.assign(pool.slots_per_layer[i], 0);
      first += pool.slots_per_layer[i];
    }
  }
  for (size_t b = 0; b < options_.hot.size() && b < layers_.size(); ++b) {
    for (uint32_t e : options_.hot[b]) {
      if (e < n_expert) layers_[b].hot[e] = 1;
    }
  }
}

int32_t ExpertCache::lookup(uint32_t layer, uint32_t expert) {
  Layer& l = layers_[layer];
  MT_CHECK(expert < l.expert_to_slot.size());
  ++l.requests[expert];
  if (l.ref_last[expert] != step_ + 1) {
    l.ref_prev[expert] = l.ref_last[expert];
    l.ref_last[expert] = step_ + 1;
  }
  const int32_t s = l.expert_to_slot[expert];
  if (s >= 0) {
    ++l.counters.hits;
    l.last_use[static_cast<size_t>(s)] = step_;
  } else {
    ++l.counters.misses;
  }
  return s;
}

int32_t ExpertCache::victim(const Layer& l) const {
  int32_t best = -1;
  for (size_t s = 0; s < l.slot_expert.size(); ++s) {
    if (l.slot_expert[s] < 0) return static_cast<int32_t>(s);  // a free slot first
  }
  if (options_.policy == CachePolicy::kStaticHot) return -1;  // residents are never evicted
  for (size_t s = 0; s < l.slot_expert.size(); ++s) {
    if (l.last_use[s] == step_) continue;  // in use this step: its slot is being read
    if (options_.policy == CachePolicy::kFrequency && step_ - l.resident_since[s] < options_.min_dwell) continue;
    if (best < 0) {
      best = static_cast<int32_t>(s);
      continue;
    }
    const auto b = static_cast<size_t>(best);
    if (options_.policy == CachePolicy::kFrequency) {
      const uint32_t rs = l.requests[static_cast<size_t>(l.slot_expert[s])];
      const uint32_t rb = l.requests[static_cast<size_t>(l.slot_expert[b])];
      if (rs < rb || (rs == rb && l.last_use[s] < l.last_use[b])) best = static_cast<int32_t>(s);
    } else if (options_.policy == CachePolicy::kLru2) {
      const uint64_t ps = l.ref_prev[static_cast<size_t>(l.slot_expert[s])];
      const uint64_t pb = l.ref_prev[static_cast<size_t>(l.slot_expert[b])];
      if (ps < pb || (ps == pb && l.last_use[s] < l.last_use[b])) best = static_cast<int32_t>(s);
    } else if (l.last_use[s] < l.last_use[b]) {
      best = static_cast<int32_t>(s);
    }
  }
  return best;
}

int32_t ExpertCache::admit(uint32_t layer, uint32_t expert) {
  Layer& l = layers_[layer];
  MT_CHECK(expert < l.expert_to_slot.size() && l.expert_to_slot[expert] < 0);
  if (l.slot_expert.empty()) return -1;
  if (options_.policy == CachePolicy::kFrequency && l.requests[expert] < options_.admit_after) return -1;
  if (options_.policy == CachePolicy::kStaticHot && !l.hot[expert]) return -1;
  const int32_t s = victim(l);
  if (s < 0) return -1;
  const auto su = static_cast<size_t>(s);
  if (l.slot_expert[su] >= 0) {
    l.expert_to_slot[static_cast<size_t>(l.slot_expert[su])] = -1;
    ++l.counters.evictions;
  }
  l.slot_expert[su] = static_cast<int32_t>(expert);
  l.expert_to_slot[expert] = s;
  l.last_use[su] = step_;
  l.resident_since[su] = step_;
  ++l.counters.admissions;
  l.counters.bytes_copied += l.where.copy_bytes;
  return s;
}

void ExpertCache::invalidate_layer(uint32_t layer) {
  Layer& l = layers_[layer];
  for (size_t s = 0; s < l.slot_expert.size(); ++s) {
    if (l.slot_expert[s] >= 0) {
      l.expert_to_slot[static_cast<size_t>(l.slot_expert[s])] = -1;
      l.slot_expert[s] = -1;
      ++l.counters.evictions;
    }
  }
}

}  // namespace mt
