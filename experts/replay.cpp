#include "experts/replay.h"

#include <algorithm>
#include <map>

namespace mt {

StatusOr<ReplayTraffic> replay_trace(const RoutingTrace& trace, ExpertScheduler& scheduler, uint32_t n_expert) {
  if (trace.n_expert > n_expert) {
    return invalid_argument("the trace selects expert " + std::to_string(trace.n_expert - 1) + " but the model has " +
                            std::to_string(n_expert) + " experts per layer");
  }
  for (uint32_t l : trace.layers) {
    if (l >= scheduler.cache().n_layers() || scheduler.expert_bytes(l) == 0) {
      return invalid_argument("the trace routes layer " + std::to_string(l) + ", which has no experts in the model");
    }
  }
  ReplayTraffic r;
  std::vector<ExpertTask> tasks;
  std::vector<Placement> placed;
  std::vector<uint32_t> count(n_expert, 0);
  size_t i = 0;
  while (i < trace.events.size()) {
    const uint64_t step = trace.events[i].step;
    size_t j = i;
    while (j < trace.events.size() && trace.events[j].step == step) ++j;
    // This step's events by layer (ascending), and its tokens.
    std::map<uint32_t, std::vector<const RoutingEvent*>> by_layer;
    std::vector<uint32_t> positions;
    for (size_t k = i; k < j; ++k) {
      by_layer[trace.events[k].layer].push_back(&trace.events[k]);
      positions.push_back(trace.events[k].pos);
    }
    std::sort(positions.begin(), positions.end());
    const uint64_t n_tokens = static_cast<uint64_t>(std::unique(positions.begin(), positions.end()) - positions.begin());
    scheduler.begin_step(n_tokens);
    for (const auto& [layer, events] : by_layer) {
      std::fill(count.begin(), count.end(), 0);
      for (const RoutingEvent* e : events) {
        for (int32_t x : e->experts) ++count[static_cast<size_t>(x)];
      }
      tasks.clear();
      for (uint32_t e = 0; e < n_expert; ++e) {
        if (count[e] > 0) tasks.push_back({e, count[e]});
      }
      const CacheCounters before = scheduler.cache().counters(layer);
      placed.clear();
      scheduler.place(layer, tasks, placed);
      if (n_tokens == 1) {
        const CacheCounters& after = scheduler.cache().counters(layer);
        const double b = static_cast<double>(scheduler.expert_bytes(layer));
        r.expert_bytes += b * static_cast<double>(tasks.size());
        r.hit_bytes += b * static_cast<double>(after.hits - before.hits);
        r.miss_bytes += b * static_cast<double>(after.misses - before.misses);
        r.admitted_bytes += static_cast<double>(after.bytes_copied - before.bytes_copied);
      }
    }
    r.decode_tokens += n_tokens == 1 ? 1 : 0;
    i = j;
  }
  return r;
}

DecodeTraffic decode_traffic(const ReplayTraffic& r, MoeMode mode, double dense_bytes, double shared_bytes,
                             uint32_t n_moe_layers, QuantType expert_type) {
  DecodeTraffic t;
  const double n = static_cast<double>(std::max<uint64_t>(1, r.decode_tokens));
  t.dense_bytes = dense_bytes;
  t.shared_bytes = shared_bytes;
  t.expert_bytes = r.expert_bytes / n;
  t.n_moe_layers = n_moe_layers;
  t.expert_type = expert_type;
  if (mode == MoeMode::kCpu) {
    t.cpu_expert_bytes = t.expert_bytes;
    return t;
  }
  t.hit_bytes = r.hit_bytes / n;
  if (mode == MoeMode::kStream) {
    t.copied_bytes = r.miss_bytes / n;
  } else {
    t.cpu_expert_bytes = r.miss_bytes / n;
    t.copied_bytes = r.admitted_bytes / n;
  }
  return t;
}

}  // namespace mt
