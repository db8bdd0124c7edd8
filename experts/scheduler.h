// Expert scheduler: for each MoE layer of each step, where every selected expert is
// computed. One object decides for the real executor (model/hybrid_moe.h) and for
// `moetier simulate`, so a replay of a run's routing record reproduces its counters
// exactly.
//
// Per layer-step the distinct selected experts are taken in ascending id order, each
// looked up once in the ExpertCache (a hot expert is read once per step however many
// tokens chose it). Then, by mode:
//   cpu:    every expert on the CPU; the cache is not consulted.
//   hybrid: a hit is computed on the device from its slot. A miss asks the cache policy
//           for a slot: admitted, the copy goes out on the copy stream and the expert is
//           computed on the device after it only when that beats the CPU for this
//           many tokens (cost_model.h device_beats_cpu: large prefill batches), else on
//           the CPU now and from the slot next time; refused, on the CPU.
//           With split_misses, the misses bound for the CPU are then shared out: some go
//           to the device this step (copied into a slot when the policy admits them, else
//           through staging, and computed there after the copy) so that the link and the
//           CPU, which read host memory side by side, finish together. The share follows
//           the cost model (one expert's bytes at the link's speed vs at the CPU's expert
//           speed) or split_fraction, the misses with the most tokens first, then the most
//           selected so far (the admissions favour popular experts). Then a miss
//           is admitted only when the device computes it in this step (its copy is on the
//           critical path anyway; an admission for later alone would queue on the link
//           ahead of the next layer's copies), so max_admissions does not apply.
//   stream: everything on the device; a miss the policy admits is copied into its slot,
//           one it refuses is copied through the staging ring (bytes counted as staged).
// Counters per layer besides the cache's: experts computed on the device and on the CPU,
// staged copies and their bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "experts/cache.h"
#include "experts/cost_model.h"
#include "experts/cost_fit.h"
#include "experts/geometry.h"
#include "experts/hw_profile.h"
#include "experts/pools.h"

namespace mt {

struct ExpertTask {
  uint32_t expert = 0;
  uint32_t n_tokens = 0;   // tokens of this step that selected it
};

struct Placement {
  uint32_t expert = 0;
  bool on_device = false;
  int32_t slot = -1;       // the layer's slot (on device and resident), -1: CPU or staged
  bool copy = false;       // the expert's bytes go host-to-device this step (into slot, or staged)
};

struct SchedulerCounters {
  uint64_t device_experts = 0, cpu_experts = 0, staged = 0, staged_bytes = 0;
};

struct SchedulerOptions {
  MoeMode mode = MoeMode::kHybrid;
  HwProfile hw = default_hw_profile();
  bool pinned = true;      // copies come from pinned host memory
  // Hybrid: at most this many admissions per layer-step (0: no cap). A miss past the cap
  // is computed on the CPU and not admitted: under weak reuse (uniform routing) admitting
  // every miss moves an expert's bytes per miss over the bus for little gain.
  uint32_t max_admissions = 0;
  // Hybrid: share each layer-step's CPU misses with the device (above). Needs an executor
  // that can stage a refused expert (cuda/tiering.h makes staging buffers for it).
  bool split_misses = false;
  // The device's share of the misses (0..1); < 0: from the cost model and hw.
  double split_fraction = -1;
  // Which misses make the device's share: the most tokens first, then (true) the experts
  // selected most often so far, or (false) ascending ids.
  bool split_popular_first = true;
  // The split's costs learned from the measured layer-steps (cost_fit.h: the CPU's
  // seconds through observe_cpu, the device's through observe_device) once enough are in,
  // instead of hw's CPU expert speed and link speed. Makes the split depend on timing: a
  // real device's executor only (simulate stays deterministic).
  bool learn_costs = false;
};

// How many of n misses of `bytes` each the device should take so that the copies (at
// h2d_gbps, after a fixed latency) and the CPU (at cpu_gbps) finish together.
uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, double h2d_gbps, double cpu_gbps);
// The same with the CPU's cost as a line (a fixed part per layer-step and a speed).
uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, double h2d_gbps, const LineCost& cpu);
// Both sides as learned lines: the device's time for m misses (0 included: it computes
// its hits whatever m) is device.fixed_s + m * bytes * device.per_byte_s, the CPU's
// cpu.seconds(n - m, bytes).
uint32_t device_share_of_misses(uint32_t n, uint64_t bytes, const LineCost& device, const LineCost& cpu);

class ExpertScheduler {
 public:
  ExpertScheduler(const ExpertGeometry& geometry, const PoolPlan& plan, uint32_t n_layer_blocks,
                  const CacheOptions& cache_options, const SchedulerOptions& options);

  // Starts a step (a forward call of n_tokens tokens). Must come before its place() calls.
  void begin_step(uint64_t n_tokens);
  // Decides a layer-step: tasks sorted by expert, distinct. Appends one Placement per task.
  void place(uint32_t layer, std::span<const ExpertTask> tasks, std::vector<Placement>& out);

  const ExpertCache& cache() const { return cache_; }
  ExpertCache& cache() { return cache_; }
  const SchedulerCounters& counters(uint32_t layer) const { return counters_[layer]; }
  const SchedulerOptions& options() const { return options_; }
  // A layer-step whose CPU share (n_experts distinct experts of `layer`, for n_jobs
  // (expert, token) pairs) took `seconds` on the CPU: a sample for learn_costs. Only
  // decode-like layer-steps count (at most 2 tokens per expert: bytes, not flops, set
  // their time).
  void observe_cpu(uint32_t layer, uint32_t n_experts, uint32_t n_jobs, double seconds);
  // A decode-like layer-step whose device share (n_misses misses copied in or staged for
  // it, besides its hits) took `seconds` from the copies' issue to its products' end.
  void observe_device(uint32_t layer, uint32_t n_misses, double seconds);
  // The CPU cost the split uses now (learned, else from hw for the type of `layer`).
  LineCost cpu_cost(uint32_t layer) const;
  const CostFit& cpu_fit() const { return cpu_fit_; }
  const CostFit& device_fit() const { return device_fit_; }
  uint64_t steps() const { return steps_; }
  uint64_t tokens() const { return tokens_; }
  // Bytes of one expert of a layer (0 for a layer without experts).
  uint64_t expert_bytes(uint32_t layer) const { return layer_bytes_[layer]; }
  // Tokens that selected each expert of a layer, over all steps (the routing's popularity,
  // whatever the mode: the skew a cache can exploit).
  std::span<const uint64_t> selections(uint32_t layer) const { return selections_[layer]; }

 private:
  // split_misses: moves part of out[first..]'s CPU experts to the device.
  void split_misses(uint32_t layer, std::span<const ExpertTask> tasks, size_t first, std::vector<Placement>& out);

  ExpertCache cache_;
  SchedulerOptions options_;
  std::vector<SchedulerCounters> counters_;
  std::vector<std::vector<uint64_t>> selections_;     // [layer block][expert]: tokens
  std::vector<uint64_t> layer_bytes_, layer_flops_;  // per block: one expert's bytes, flops per token
  std::vector<QuantType> layer_type_;
  CostFit cpu_fit_, device_fit_;
  uint64_t steps_ = 0, tokens_ = 0;
};

}  // namespace mt
