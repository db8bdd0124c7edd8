#include "experts/scheduler.h"

#include "core/check.h"

namespace mt {

ExpertScheduler::ExpertScheduler(const ExpertGeometry& geometry, const PoolPlan& plan, uint32_t n_layer_blocks,
                                 const CacheOptions& cache_options, const SchedulerOptions& options)
    : cache_(plan, n_layer_blocks, geometry.n_expert, cache_options),
      options_(options),
      counters_(n_layer_blocks),
      layer_bytes_(n_layer_blocks, 0),
      layer_flops_(n_layer_blocks, 0),
      layer_type_(n_layer_blocks, QuantType::F32) {
  for (const LayerExpertGeometry& l : geometry.layers) {
    MT_CHECK(l.layer < n_layer_blocks);
    layer_bytes_[l.layer] = l.bytes_per_expert();
    uint64_t flops = 0;
    for (const ProjGeometry& p : l.proj) flops += p.present ? 2 * p.n_in * p.n_out : 0;
    layer_flops_[l.layer] = flops;
    layer_type_[l.layer] = l.up().type;
  }
}

void ExpertScheduler::begin_step(uint64_t n_tokens) {
  if (steps_ > 0) cache_.next_step();
  ++steps_;
  tokens_ += n_tokens;
}

void ExpertScheduler::place(uint32_t layer, std::span<const ExpertTask> tasks, std::vector<Placement>& out) {
  MT_CHECK(layer < counters_.size() && steps_ > 0);
  SchedulerCounters& c = counters_[layer];
  uint32_t admitted = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ExpertTask& t = tasks[i];
    MT_CHECK(i == 0 || tasks[i - 1].expert < t.expert);
    Placement p{t.expert, false, -1, false};
    if (options_.mode != MoeMode::kCpu) {
      p.slot = cache_.lookup(layer, t.expert);
      if (p.slot >= 0) {
        p.on_device = true;
      } else if (options_.mode == MoeMode::kHybrid && options_.max_admissions > 0 &&
                 admitted >= options_.max_admissions) {
        p.slot = -1;  // over this layer-step's admission cap: the CPU computes it
      } else {
        p.slot = cache_.admit(layer, t.expert);
        p.copy = p.slot >= 0;
        admitted += p.copy ? 1 : 0;
        if (options_.mode == MoeMode::kStream) {
          p.on_device = true;
          if (p.slot < 0) {  // through the staging ring
            p.copy = true;
            ++c.staged;
            c.staged_bytes += layer_bytes_[layer];
          }
        } else if (p.slot >= 0) {
          p.on_device = device_beats_cpu(layer_bytes_[layer], t.n_tokens, layer_flops_[layer], layer_type_[layer],
                                         options_.pinned, options_.hw);
        }
      }
    }
    ++(p.on_device ? c.device_experts : c.cpu_experts);
    out.push_back(p);
  }
}

}  // namespace mt
