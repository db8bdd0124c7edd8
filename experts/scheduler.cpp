#include "experts/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

namespace {
constexpr double kCopyLatencySeconds = 10e-6;  // queueing one layer-step's copies

// The m of 0..n that makes max(device time, CPU time) least; the device's fixed part is
// paid with copies only (fixed_with_copies_only) or always.
uint32_t best_share(uint32_t n, uint64_t bytes, const LineCost& device, bool fixed_with_copies_only, const LineCost& cpu) {
  if (n == 0 || device.per_byte_s <= 0) return 0;
  if (cpu.per_byte_s <= 0) return n;
  const double b = static_cast<double>(bytes);
  uint32_t best = 0;
  double best_t = INFINITY;
  for (uint32_t m = 0; m <= n; ++m) {
    const double t_dev = m == 0 && fixed_with_copies_only ? 0.0 : device.fixed_s + m * b * device.per_byte_s;
    const double t_cpu = cpu.seconds(n - m, bytes);
    const double t = std::max(t_dev, t_cpu);
    if (t < best_t) {
      best_t = t;
      best = m;
    }
  }
  return best;
}

}  // namespace

uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, double h2d_gbps, double cpu_gbps) {
  if (cpu_gbps <= 0) return h2d_gbps > 0 ? n : 0;
  return device_share_of_misses(n, bytes, h2d_gbps, LineCost{0, 1.0 / (cpu_gbps * 1e9)});
}

uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, double h2d_gbps, const LineCost& cpu) {
  if (h2d_gbps <= 0) return 0;
  return best_share(n, bytes, LineCost{kCopyLatencySeconds, 1.0 / (h2d_gbps * 1e9)}, true, cpu);
}

uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, const LineCost& device, const LineCost& cpu) {
  return best_share(n, bytes, device, false, cpu);
}

ExpertScheduler::ExpertScheduler(const ExpertGeometry& geometry, const PoolPlan& plan, uint32_t n_layer_blocks,
                                 const CacheOptions& cache_options, const SchedulerOptions& options)
    : cache_(plan, n_layer_blocks, geometry.n_expert, cache_options),
      options_(options),
      counters_(n_layer_blocks),
      selections_(n_layer_blocks, std::vector<uint64_t>(geometry.n_expert, 0)),
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
    MT_CHECK(t.expert < selections_[layer].size());
    selections_[layer][t.expert] += t.n_tokens;
    Placement p{t.expert, false, -1, false};
    if (options_.mode != MoeMode::kCpu) {
      p.slot = cache_.lookup(layer, t.expert);
      const bool split = options_.mode == MoeMode::kHybrid && options_.split_misses;
      if (p.slot >= 0) {
        p.on_device = true;
      } else if (split && !device_beats_cpu(layer_bytes_[layer], t.n_tokens, layer_flops_[layer], layer_type_[layer],
                                            options_.pinned, options_.hw)) {
        p.slot = -1;  // split_misses decides: admitted only if the device computes it now
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
    out.push_back(p);
  }
  const size_t first = out.size() - tasks.size();
  if (options_.mode == MoeMode::kHybrid && options_.split_misses) split_misses(layer, tasks, first, out);
  for (size_t i = first; i < out.size(); ++i) ++(out[i].on_device ? c.device_experts : c.cpu_experts);
}

void ExpertScheduler::observe_cpu(uint32_t layer, uint32_t n_experts, uint32_t n_jobs, double seconds) {
  MT_CHECK(layer < layer_bytes_.size());
  if (!options_.learn_costs || n_experts == 0 || n_jobs > 2 * n_experts) return;
  cpu_fit_.add(n_experts * layer_bytes_[layer], seconds);
}

void ExpertScheduler::observe_device(uint32_t layer, uint32_t n_misses, double seconds) {
  MT_CHECK(layer < layer_bytes_.size());
  if (options_.learn_costs) device_fit_.add(n_misses * layer_bytes_[layer], seconds);
}

LineCost ExpertScheduler::cpu_cost(uint32_t layer) const {
  if (options_.learn_costs && cpu_fit_.ready()) return cpu_fit_.cost();
  const double gbps = options_.hw.cpu_decode_gbps(layer_type_[layer]);
  return gbps > 0 ? LineCost{0, 1.0 / (gbps * 1e9)} : LineCost{};
}

void ExpertScheduler::split_misses(uint32_t layer, std::span<const ExpertTask> tasks, size_t first,
                                   std::vector<Placement>& out) {
  SchedulerCounters& c = counters_[layer];
  std::vector<size_t> cpu;  // indices into tasks of the misses bound for the CPU
  for (size_t i = 0; i < tasks.size(); ++i) if (!out[first + i].on_device) cpu.push_back(i);
  if (cpu.empty()) return;
  const uint64_t bytes = layer_bytes_[layer];
  uint32_t m = 0;
  if (options_.split_fraction >= 0) {
    m = static_cast<uint32_t>(std::lround(std::min(1.0, options_.split_fraction) * static_cast<double>(cpu.size())));
  } else {
    const auto n = static_cast<uint32_t>(cpu.size());
    if (options_.learn_costs && device_fit_.ready()) {
      m = device_share_of_misses(n, bytes, device_fit_.cost(), cpu_cost(layer));
    } else {
      m = device_share_of_misses(n, bytes, options_.hw.h2d_gbps(bytes, options_.pinned), cpu_cost(layer));
    }
  }
  // The experts with the most tokens first; among equals (every miss of a decode step), the
  // most selected so far, so that the admissions the device's share brings in are the
  // popular experts (with skewed routing the cache then holds them) rather than the lowest
  // ids. (With the split, place() admitted no miss it left to the CPU, so none of these
  // has a copy queued yet.)
  const std::vector<uint64_t>& sel = selections_[layer];
  const bool popular = options_.split_popular_first;
  std::stable_sort(cpu.begin(), cpu.end(), [&](size_t a, size_t b) {
    if (tasks[a].n_tokens != tasks[b].n_tokens) return tasks[a].n_tokens > tasks[b].n_tokens;
    return popular && sel[tasks[a].expert] > sel[tasks[b].expert];
  });
  for (size_t k = 0; k < m && k < cpu.size(); ++k) {
    Placement& p = out[first + cpu[k]];
    MT_CHECK(!p.copy);
    p.on_device = true;
    p.slot = cache_.admit(layer, p.expert);
    p.copy = true;
    if (p.slot < 0) {  // refused by the policy: through staging
      ++c.staged;
      c.staged_bytes += bytes;
    }
  }
}

}  // namespace mt
