// MoE offload: the routed experts of a layer split between a device and the CPU, as the
// ExpertScheduler (experts/scheduler.h) places them; here the device is simulated (host
// memory behind the device's interface, its own worker thread as the device stream), so
// the whole hybrid path runs and is tested without a GPU.
//
// The simulated device holds the expert cache pools as host allocations of exactly the
// plan's bytes; slot s of a layer is at pool base + (layer's first slot + s) * expert
// bytes and holds gate | up | down of one expert. Copies come from the host expert store
// (experts/host_store.h) over the bytes the CPU kernels read (the model's tensors,
// interleaved or mapped), so an expert computes bit-identically from its slot or from the
// host: a pinned layer's expert in one copy, a pageable layer's through the pinned
// staging ring (two copies). One layer-step: the device thread copies the step's
// admissions and staged experts, then computes its experts (and the shared expert); the
// calling thread computes the CPU experts on the pool at the same time; then both join.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "experts/host_store.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "model/weights.h"

namespace mt {

class SimulatedDevice {
 public:
  // Pools sized by plan; slot views built for every MoE layer of w; copies from store
  // (which must outlive the device), pageable layers through ring.
  SimulatedDevice(const PoolPlan& plan, const ExpertScheduler& scheduler, const ModelWeights& w,
                  const HostExpertStore& store, StagingRing ring);
  ~SimulatedDevice();
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  // The expert's gate, up and down as one-matrix tensors in the layer's slot.
  struct ExpertViews {
    Tensor gate, up, down;
  };
  const ExpertViews& slot_views(uint32_t layer, int32_t slot) const;
  // Copies expert e of the layer from the host tensors into the slot.
  void copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot);
  // Copies expert e into staging buffer i of this layer-step and returns views of it.
  const ExpertViews& stage(uint32_t layer, uint32_t expert, size_t i);

  // The device stream: run() queues work on the device thread, wait() blocks until all
  // queued work is done.
  void run(std::function<void()> work);
  void wait();
  ThreadPool& pool() { return pool_; }
  uint64_t bytes_copied() const { return bytes_copied_; }
  // Per model layer: copy and compute time of the layer's steps (experts/stats.h). The
  // device thread adds copy_s and device_s, the calling thread cpu_s; read after wait().
  LayerTiming& timing(uint32_t layer) { return timing_[layer]; }
  const std::vector<LayerTiming>& timings() const { return timing_; }
  uint64_t bytes_through_ring() const { return bytes_through_ring_; }

 private:
  ExpertViews views_at(const LayerWeights& lw, uint8_t* base) const;
  // Copies expert e of the layer to dst (gate | up | down) from the store; returns bytes.
  uint64_t copy_expert(uint32_t layer, uint32_t expert, uint8_t* dst);
  void worker();

  const ModelWeights& w_;
  const HostExpertStore& store_;
  StagingRing ring_;
  uint64_t bytes_through_ring_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> pools_;
  std::vector<std::vector<ExpertViews>> slots_;   // [block][slot]
  std::vector<std::unique_ptr<uint8_t[]>> staging_;
  std::vector<ExpertViews> staging_views_;
  uint64_t staging_bytes_ = 0;
  uint64_t bytes_copied_ = 0;
  std::vector<LayerTiming> timing_;  // (n_layer)
  ThreadPool pool_{1};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// What a Session hands the model to run MoE layers offloaded.
struct MoeOffload {
  ExpertScheduler* scheduler = nullptr;
  SimulatedDevice* device = nullptr;
};

}  // namespace mt

namespace mt {

// A Session's offload and everything it needs, owned together.
struct OffloadState {
  ExpertGeometry geometry;
  PoolPlan plan;
  CacheOptions cache_options;
  std::unique_ptr<HostAllocator> allocator;   // the simulated pinned allocator
  std::unique_ptr<HostExpertStore> store;
  PinChoice pins;
  std::unique_ptr<ExpertScheduler> scheduler;
  std::unique_ptr<SimulatedDevice> device;
  MoeOffload offload;
};

// Builds the scheduler over the plan's pools, the host expert store over the model's
// expert tensors with the layers choose_pinned_layers() picks for pin_budget pinned
// (through a SimulatedPinnedAllocator that refuses beyond pin_limit bytes, to exercise
// refusals), and the simulated device. Errors: a model whose experts this path cannot
// hold (merged gate/up tensors), tensors whose bytes disagree with the geometry.
StatusOr<std::unique_ptr<OffloadState>> make_offload(const ModelWeights& w, ExpertGeometry geometry, PoolPlan plan,
                                                     const CacheOptions& cache_options,
                                                     const SchedulerOptions& scheduler_options, uint64_t pin_budget = 0,
                                                     uint64_t pin_limit = SimulatedPinnedAllocator::kNoLimit);

}  // namespace mt
