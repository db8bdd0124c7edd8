#include "experts/pools.h"

#include <algorithm>

#include "core/check.h"

namespace mt {

uint64_t PoolPlan::used_bytes() const {
  uint64_t sum = 0;
  for (const ExpertPool& p : pools) sum += p.bytes();
  return sum;
}

PoolPlan plan_pools(const ExpertGeometry& geometry, uint64_t budget_bytes) {
  PoolPlan plan;
  plan.budget = budget_bytes;
  // One slot in every layer of every group costs `round`.
  unsigned __int128 round = 0;
  for (const GeometryGroup& g : geometry.groups) {
    MT_CHECK(g.bytes_per_expert() > 0 && !g.layers.empty());
    round += static_cast<unsigned __int128>(g.layers.size()) * g.bytes_per_expert();
  }
  std::vector<uint64_t> cap;  // most slots a pool can use: all experts of its layers
  for (const GeometryGroup& g : geometry.groups) {
    ExpertPool p;
    p.expert_bytes = g.bytes_per_expert();
    p.layers = g.layers;
    std::sort(p.layers.begin(), p.layers.end());
    p.layer_bytes.assign(p.layers.size(), p.expert_bytes);
    cap.push_back(static_cast<uint64_t>(g.layers.size()) * geometry.n_expert);
    // The pool's proportional share buys budget * layers / round slots.
    if (round > 0) {
      const unsigned __int128 share = static_cast<unsigned __int128>(budget_bytes) * g.layers.size() / round;
      p.slots = static_cast<uint64_t>(std::min<unsigned __int128>(share, cap.back()));
    }
    plan.pools.push_back(std::move(p));
  }
  uint64_t left = budget_bytes - plan.used_bytes();
  for (;;) {  // the rest, one slot at a time, to the fitting pool with the fewest slots per layer
    ExpertPool* best = nullptr;
    for (size_t i = 0; i < plan.pools.size(); ++i) {
      ExpertPool& p = plan.pools[i];
      if (p.slots >= cap[i] || p.expert_bytes > left) continue;
      const auto per_layer = [](const ExpertPool& x) { return static_cast<double>(x.slots) / static_cast<double>(x.layers.size()); };
      if (best == nullptr || per_layer(p) < per_layer(*best) ||
          (per_layer(p) == per_layer(*best) && p.expert_bytes < best->expert_bytes)) {
        best = &p;
      }
    }
    if (best == nullptr) break;
    ++best->slots;
    left -= best->expert_bytes;
  }
  for (ExpertPool& p : plan.pools) {
    const auto n = static_cast<uint64_t>(p.layers.size());
    p.slots_per_layer.assign(p.layers.size(), static_cast<uint32_t>(p.slots / n));
    for (uint64_t i = 0; i < p.slots % n; ++i) ++p.slots_per_layer[i];
  }
  MT_CHECK(plan.used_bytes() <= budget_bytes);
  return plan;
}

PoolPlan plan_unified_pool(const ExpertGeometry& geometry, uint64_t budget_bytes) {
  PoolPlan plan;
  plan.budget = budget_bytes;
  ExpertPool p;
  std::vector<std::pair<uint32_t, uint64_t>> layers;  // (block, its expert bytes)
  for (const GeometryGroup& g : geometry.groups) {
    MT_CHECK(g.bytes_per_expert() > 0 && !g.layers.empty());
    p.expert_bytes = std::max(p.expert_bytes, g.bytes_per_expert());
    for (uint32_t l : g.layers) layers.emplace_back(l, g.bytes_per_expert());
  }
  if (layers.empty()) return plan;
  std::sort(layers.begin(), layers.end());
  for (const auto& [l, bytes] : layers) {
    p.layers.push_back(l);
    p.layer_bytes.push_back(bytes);
  }
  const auto n = static_cast<uint64_t>(p.layers.size());
  p.slots = std::min<uint64_t>(budget_bytes / p.expert_bytes, n * geometry.n_expert);
  p.slots_per_layer.assign(p.layers.size(), static_cast<uint32_t>(p.slots / n));
  for (uint64_t i = 0; i < p.slots % n; ++i) ++p.slots_per_layer[i];
  plan.pools.push_back(std::move(p));
  MT_CHECK(plan.used_bytes() <= budget_bytes);
  return plan;
}

}  // namespace mt
