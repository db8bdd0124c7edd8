#include "experts/executor.h"

#include <chrono>

#include "core/check.h"

namespace mt {

TieredExecutor::TieredExecutor(ExpertScheduler& scheduler, ExpertDevice& device, CpuExperts& cpu, uint32_t n_layer)
    : scheduler_(scheduler), device_(device), cpu_(cpu), timing_(n_layer), pending_device_misses_(n_layer, -1) {}

void TieredExecutor::observe_device(uint32_t layer, double seconds) {
  MT_CHECK(layer < pending_device_misses_.size());
  if (pending_device_misses_[layer] >= 0) {
    scheduler_.observe_device(layer, static_cast<uint32_t>(pending_device_misses_[layer]), seconds);
  }
  pending_device_misses_[layer] = -1;
}

void TieredExecutor::run(const LayerStep& step) {
  const uint32_t l = step.layer, S = step.n_tokens * step.k;
  MT_CHECK(l < timing_.size());
  const size_t X = scheduler_.selections(l).size();
  count_.assign(X, 0);
  for (uint32_t i = 0; i < S; ++i) {
    MT_CHECK(step.selected[i] >= 0 && static_cast<size_t>(step.selected[i]) < X);
    ++count_[static_cast<uint32_t>(step.selected[i])];
  }
  tasks_.clear();
  for (uint32_t e = 0; e < X; ++e) {
    if (count_[e] > 0) tasks_.push_back({e, count_[e]});
  }
  placed_.clear();
  scheduler_.place(l, tasks_, placed_);

  // The copy queue is first in, first out: the copies of experts the device computes now
  // go first, then admissions for later steps, which the compute never waits for.
  slot_of_.assign(X, -1);
  staged_of_.assign(X, -1);
  staged_.clear();
  for (const Placement& p : placed_) {
    if (!p.on_device) continue;
    if (p.slot >= 0) {
      if (p.copy) device_.copy_to_slot(l, p.expert, p.slot);
      slot_of_[p.expert] = p.slot;
    } else {  // refused by the policy: through staging
      staged_.push_back(p.expert);
      staged_of_[p.expert] = static_cast<int32_t>(p.expert);
    }
  }
  device_.wait_copies(l);
  if (!staged_.empty()) device_.stage(l, staged_);
  for (const Placement& p : placed_) {
    if (!p.on_device && p.copy && p.slot >= 0) device_.copy_to_slot(l, p.expert, p.slot);
  }

  // The device's share for the learned split: misses copied in or staged for this step
  // (admissions for later excluded), when the layer-step is decode-like (as observe_cpu).
  uint32_t device_misses = 0;
  for (const Placement& p : placed_) device_misses += p.on_device && (p.copy || p.slot < 0) ? 1 : 0;
  pending_device_misses_[l] = S <= 2 * tasks_.size() ? static_cast<int32_t>(device_misses) : -1;

  DeviceGroup g;
  g.layer = l, g.n_tokens = step.n_tokens, g.k = step.k, g.timing = &timing_[l];
  slot_.resize(S);
  staged_sel_.resize(S);
  jobs_.clear();
  cpu_slots_.clear();
  for (uint32_t i = 0; i < S; ++i) {
    const auto e = static_cast<uint32_t>(step.selected[i]);
    slot_[i] = slot_of_[e];
    staged_sel_[i] = staged_of_[e];
    if (slot_[i] >= 0) {
      ++g.n_slot;
    } else if (staged_sel_[i] >= 0) {
      ++g.n_staged;
    } else {
      jobs_.push_back({e, i / step.k});
      cpu_slots_.push_back(static_cast<int32_t>(i));
    }
  }
  g.selected = {step.selected, S};
  g.slot = slot_;
  g.staged = staged_sel_;
  device_.compute(g);
  if (!jobs_.empty()) {
    float* rows = device_.cpu_rows(jobs_.size());
    const auto t0 = std::chrono::steady_clock::now();
    cpu_.compute(l, step.h, step.n_tokens, jobs_, rows);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    timing_[l].cpu_s += cpu_s;
    uint32_t cpu_experts = 0;
    for (const Placement& p : placed_) cpu_experts += p.on_device ? 0 : 1;
    scheduler_.observe_cpu(l, cpu_experts, static_cast<uint32_t>(jobs_.size()), cpu_s);
    device_.finish(g, cpu_slots_, rows);
  } else {
    device_.finish(g, {}, nullptr);
  }
}

}  // namespace mt
