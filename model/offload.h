// MoE offload on the CPU: the tiered-expert executor (experts/executor.h) over a
// simulated device (host memory behind the device's interface, its own worker thread as
// the device stream), so the whole tiered path runs and is tested without a GPU; and the
// model's side of every tiering: its CPU expert code as the executor's CpuExperts, and
// the checks of a model's expert tensors that the simulated and the CUDA tiering share.
//
// The simulated device holds the expert cache pools as host allocations of exactly the
// plan's bytes; slot s of a layer is at pool base + (layer's first slot + s) * expert
// bytes and holds gate | up | down of one expert. Copies come from the host expert store
// (experts/host_store.h) over the bytes the CPU kernels read (the model's tensors,
// interleaved or mapped), so an expert computes bit-identically from its slot or from the
// host: a pinned layer's expert in one copy, a pageable layer's through the pinned
// staging ring (two copies). One layer-step: the device thread copies the step's
// admissions and staged experts, then computes its experts and the shared expert (the
// model's expert code over slot views, expert_rows.h) while the calling thread computes
// the CPU's jobs; finish() joins them and puts the CPU's rows beside the device's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "experts/executor.h"
#include "experts/host_store.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "experts/tiering.h"
#include "model/model.h"
#include "model/weights.h"

namespace mt {

class SimulatedDevice final : public ExpertDevice {
 public:
  // Pools sized by plan; slot views built for every MoE layer of w; copies from store
  // (which must outlive the device), pageable layers through ring.
  SimulatedDevice(const PoolPlan& plan, const ExpertScheduler& scheduler, const ModelWeights& w,
                  const HostExpertStore& store, StagingRing ring);
  ~SimulatedDevice() override;
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  // The layer-step the next group belongs to, set by moe_block before the executor runs.
  struct Layer {
    const LayerWeights* w = nullptr;
    const float* h = nullptr;  // (n_tokens, n_embd) normed input
    uint32_t n_tokens = 0;
    float* out = nullptr;      // (n_tokens * K, n_embd): row i is selection slot i's
    bool shared = false;       // the shared expert computed with the device's experts
    float *g_sh = nullptr, *u_sh = nullptr, *d_sh = nullptr;  // its (n_tokens, n_ff_sh | n_embd) rows
    size_t n_ff_sh = 0;
  };
  void begin_layer(const Layer& layer) { layer_ = layer; }

  // ExpertDevice: copies, staging and the group are queued on the device thread in call
  // order (so wait_copies has nothing to do); finish() waits for it.
  void copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) override;
  void wait_copies(uint32_t) override {}
  void stage(uint32_t layer, std::span<const uint32_t> experts) override;
  void compute(const DeviceGroup& group) override;
  float* cpu_rows(size_t n) override;
  void finish(const DeviceGroup& group, std::span<const int32_t> cpu_slots, const float* rows) override;

  // The expert's gate, up and down as one-matrix tensors in the layer's slot.
  struct ExpertViews {
    Tensor gate, up, down;
  };
  const ExpertViews& slot_views(uint32_t layer, int32_t slot) const;
  uint64_t bytes_copied() const { return bytes_copied_; }
  uint64_t bytes_through_ring() const { return bytes_through_ring_; }

 private:
  ExpertViews views_at(const LayerWeights& lw, uint8_t* base) const;
  // Copies expert e of the layer to dst (gate | up | down) from the store; returns bytes.
  uint64_t copy_expert(uint32_t layer, uint32_t expert, uint8_t* dst);
  // The group's products on the device thread.
  void run_group(const DeviceGroup& g);
  // The device stream: run() queues work on the device thread, wait() blocks until all
  // queued work is done.
  void run(std::function<void()> work);
  void wait();
  void worker();

  const ModelWeights& w_;
  const HostExpertStore& store_;
  StagingRing ring_;
  Layer layer_;
  uint64_t bytes_through_ring_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> pools_;
  std::vector<std::vector<ExpertViews>> slots_;   // [block][slot]
  std::vector<std::unique_ptr<uint8_t[]>> staging_;
  std::vector<ExpertViews> staging_views_;
  std::vector<uint32_t> staged_;                  // this layer-step's staged experts, by buffer
  uint64_t staging_bytes_ = 0;
  uint64_t bytes_copied_ = 0;
  double copy_s_ = 0;                             // copies since the last group (device thread)
  std::vector<float> in_, g_, u_, d_, cpu_rows_;  // the group's rows; the CPU's
  ThreadPool pool_{1};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// The model's CPU expert code as the executor's CpuExperts (model/layers.h
// expert_outputs over the model's tensors, on its pool).
class ModelCpuExperts final : public CpuExperts {
 public:
  explicit ModelCpuExperts(const Model& model) : model_(model) {}
  void compute(uint32_t layer, const float* h, uint32_t n_tokens, std::span<const ExpertJob> jobs,
               float* out) override;

 private:
  const Model& model_;
};

// A model's expert tensors as a tiering needs them: every layer of the geometry has a
// router, gate and up as separate tensors, and the bytes the geometry says. `what` opens
// the error ("offload", "GPU tiering").
Status check_expert_layers(const ModelWeights& w, const ExpertGeometry& geometry, const std::string& what);

// What a Session hands the model to run MoE layers offloaded.
struct MoeOffload {
  ExpertScheduler* scheduler = nullptr;
  TieredExecutor* executor = nullptr;
  SimulatedDevice* device = nullptr;  // the executor's device
};

// A Session's offload and everything it needs, owned together (experts/tiering.h).
struct OffloadState final : ExpertTiering {
  SimulatedDevice* sim = nullptr;  // == device
  MoeOffload offload;
  void bound() override;
};

// Builds the tiering (experts/tiering.h) over the model's expert tensors: the host store
// over the bytes the CPU kernels read with the layers choose_pinned_layers() picks for
// pin_budget pinned (through a SimulatedPinnedAllocator that refuses beyond pin_limit
// bytes, to exercise refusals), the simulated device with a two-buffer staging ring, the
// model's CPU experts. Errors: check_expert_layers'.
StatusOr<std::unique_ptr<OffloadState>> make_offload(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                     const CacheOptions& cache_options,
                                                     const SchedulerOptions& scheduler_options, uint64_t pin_budget = 0,
                                                     uint64_t pin_limit = SimulatedPinnedAllocator::kNoLimit);

}  // namespace mt
