// The tiered-expert executor: one MoE layer-step of a model whose routed experts live in
// host memory, split between a device and the CPU as the ExpertScheduler (scheduler.h)
// places them. One class for every device; the device is reached only through the
// ExpertDevice interface below (a simulated one in model/offload.h, the GPU in
// cuda/tiering_device.h) and the CPU's share through CpuExperts (model/offload.h
// ModelCpuExperts), so this folder never sees the model or CUDA.
//
// A layer-step (run()), given the step's routing and normed rows on the host:
//   1. the (token, rank) selections counted per expert -> ExpertTasks (ascending ids)
//      -> scheduler.place();
//   2. the copies, in this order on the device's one copy queue: the admissions of
//      experts the device computes now; the device's compute made to wait for the
//      layer's copies queued so far (earlier steps' are usually done long ago); the
//      policy-refused device misses staged for this step; then admissions for later
//      steps (never waited for now);
//   3. every selection slot (token * K + rank) goes to a device slot, to staging, or to
//      a CPU job (expert, token);
//   4. the device's group started (asynchronous), the CPU's jobs computed on the calling
//      thread meanwhile, their rows handed to the device, which puts them beside its own
//      (waiting for its work where the device needs it);
//   5. the CPU's seconds added to the layer's timing (experts/stats.h LayerTiming) and
//      given to the scheduler (observe_cpu: the learned CPU cost of the split); the
//      device adds its copy and compute seconds to the same entry, and its share's time
//      through observe_device (the learned device cost).
// Every selected expert of the layer-step is computed exactly once, on exactly one side.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "experts/scheduler.h"
#include "experts/stats.h"

namespace mt {

// One routed expert applied to one token's normed row.
struct ExpertJob {
  uint32_t expert = 0, token = 0;
};

// The CPU's expert code at the level of (expert, token) jobs of a layer.
class CpuExperts {
 public:
  virtual ~CpuExperts() = default;
  // out row i (n_embd floats) = down_e(act(gate_e h_t, up_e h_t)) for jobs[i] = {e, t},
  // exactly as the untiered CPU layer computes that expert's row; h (n_tokens, n_embd).
  virtual void compute(uint32_t layer, const float* h, uint32_t n_tokens, std::span<const ExpertJob> jobs,
                       float* out) = 0;
};

// A layer-step's device share as the executor hands it over. Per selection slot
// i = token * K + rank (n_tokens * k of them): slot[i] >= 0 computes it from that cache
// slot, staged[i] >= 0 (the expert id) from this step's staging, both -1: the CPU's.
struct DeviceGroup {
  uint32_t layer = 0, n_tokens = 0, k = 0;
  std::span<const int32_t> selected;  // (n_tokens * k) expert ids
  std::span<const int32_t> slot;      // (n_tokens * k)
  std::span<const int32_t> staged;    // (n_tokens * k)
  uint32_t n_slot = 0;                // selections computed from slots
  uint32_t n_staged = 0;              // selections computed from staging
  LayerTiming* timing = nullptr;      // the layer's entry: the device adds copy_s and device_s (a GPU
                                      // when it reads the step's events, into timing())
};

// The device under the executor. Copies and compute are queued in call order on the
// device's streams; nothing here blocks the host but finish() where the device needs it.
class ExpertDevice {
 public:
  virtual ~ExpertDevice() = default;
  // Queues the copy of `expert` of `layer` from the host store into `slot` of the layer.
  virtual void copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) = 0;
  // The device's compute waits for every copy into the layer's slots queued so far.
  virtual void wait_copies(uint32_t layer) = 0;
  // Queues the copy of these experts (device misses the policy refused a slot) into
  // staging, read by this layer-step's group only.
  virtual void stage(uint32_t layer, std::span<const uint32_t> experts) = 0;
  // Starts the group's products (asynchronous); called once per layer-step, also when
  // the device computes nothing (n_slot + n_staged == 0).
  virtual void compute(const DeviceGroup& group) = 0;
  // (n, n_embd) host rows the CPU's results go into, valid until finish().
  virtual float* cpu_rows(size_t n) = 0;
  // The CPU's rows (rows[i] is selection slot cpu_slots[i]'s) go beside the group's;
  // after it the layer-step's output holds every selection's row (on the device's
  // stream, for a device that orders its work on one).
  virtual void finish(const DeviceGroup& group, std::span<const int32_t> cpu_slots, const float* rows) = 0;
};

// One layer-step's input: the routing and the normed rows, on the host.
struct LayerStep {
  uint32_t layer = 0, n_tokens = 0, k = 0;
  const int32_t* selected = nullptr;  // (n_tokens, k) expert ids
  const float* h = nullptr;           // (n_tokens, n_embd) normed FFN input (the CPU's)
};

class TieredExecutor {
 public:
  // n_layer: the model's layers (timing entries). scheduler, device and cpu must outlive it.
  TieredExecutor(ExpertScheduler& scheduler, ExpertDevice& device, CpuExperts& cpu, uint32_t n_layer);

  // Runs one layer-step (above). The scheduler's begin_step() comes first for each step.
  void run(const LayerStep& step);

  // The device's time for its share of the layer's last layer-step (from the copies'
  // issue to its products' end; a GPU reads it from events after the step): a sample for
  // the scheduler's learned split (ExpertScheduler::observe_device) when that layer-step
  // was decode-like.
  void observe_device(uint32_t layer, double seconds);

  ExpertScheduler& scheduler() { return scheduler_; }
  // Per model layer: copy, device and CPU seconds over all steps (read after the
  // device's work is done; the GPU adds device time when a step's events are read).
  const std::vector<LayerTiming>& timing() const { return timing_; }
  std::vector<LayerTiming>& timing() { return timing_; }

 private:
  ExpertScheduler& scheduler_;
  ExpertDevice& device_;
  CpuExperts& cpu_;
  std::vector<LayerTiming> timing_;  // (n_layer)
  std::vector<int32_t> pending_device_misses_;  // (n_layer) the last layer-step's device misses, -1: no sample
  // A layer-step's scratch, kept between calls.
  std::vector<uint32_t> count_;
  std::vector<ExpertTask> tasks_;
  std::vector<Placement> placed_;
  std::vector<int32_t> slot_of_, staged_of_;  // (n_expert) this step's slot / staged id, -1
  std::vector<uint32_t> staged_;
  std::vector<int32_t> slot_, staged_sel_, cpu_slots_;
  std::vector<ExpertJob> jobs_;
};

}  // namespace mt
