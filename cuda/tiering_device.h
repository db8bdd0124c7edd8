// The GPU as the tiered-expert executor's device (experts/executor.h ExpertDevice):
// admissions and staging through the device expert cache's copy stream
// (cuda/expert_cache.h), the group's grouped products over the layer's cache slots (and
// this step's staging buffer) on the compute stream, the CPU's rows uploaded into the
// same (T*K, n_embd) buffer and scattered to their slots, so the weighted sum runs in rank
// order exactly as the resident path's.
//
// A hybrid decode layer-step on the compute stream, in launch order:
//   routing to the host (ids and normed rows, a few KB: the step's one host wait per
//   layer, fetch_routing) | [admissions now on the copy stream; compute waits for the
//   layer's copies; refused misses staged; admissions for later] | slot ids (and staged
//   ids) uploaded | device begin event | wait for the staging | grouped products (the
//   sequence's, through GroupProducts) | staging released | device end event | (host:
//   the CPU's experts) | the CPU's rows and their slots uploaded, scattered into d.
// The products are the sequence's own code (cuda/sequence_moe.cpp), so tiered and
// resident layers run the same kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "cuda/expert_cache.h"
#include "cuda/kernels/memory.h"
#include "experts/executor.h"

namespace mt::cuda {

// One set of expert matrices a group's grouped products read, with per selection slot
// ids (T*K, on the device; -1: a row another set or the CPU computes).
struct ProductSet {
  ExpertViews m;
  const int32_t* ids = nullptr;
};

// The sequence's grouped expert products over one or two sets (one SwiGLU serves both).
class GroupProducts {
 public:
  virtual void launch(std::span<const ProductSet> sets) = 0;

 protected:
  ~GroupProducts() = default;
};

class CudaExpertDevice final : public ExpertDevice {
 public:
  // The device cache over plan (DeviceExpertCache::create's arguments) and the pinned and
  // device buffers of a layer-step of up to max_tokens tokens of top-k k, n_embd wide.
  static StatusOr<std::unique_ptr<CudaExpertDevice>> create(const PoolPlan& plan, const ExpertCache& cache,
                                                            const HostExpertStore& store, HostAllocator& allocator,
                                                            uint32_t stream_buffers, uint32_t n_layer, uint32_t k,
                                                            uint32_t n_embd, uint32_t max_tokens);
  ~CudaExpertDevice() override;
  CudaExpertDevice(const CudaExpertDevice&) = delete;
  CudaExpertDevice& operator=(const CudaExpertDevice&) = delete;

  DeviceExpertCache& cache() { return *cache_; }

  // The layer-step the next group belongs to.
  struct Layer {
    cudaStream_t stream = nullptr;
    GroupProducts* products = nullptr;
    float* d = nullptr;  // (T*K, n_embd) device rows, per selection slot
  };
  // Copies the routing (sel (T, K) ids, h (T, n_embd) normed rows, on the device) into
  // pinned memory and waits for them: the layer-step's input for the executor.
  LayerStep fetch_routing(uint32_t layer, uint32_t n_tokens, const int32_t* sel, const float* h, cudaStream_t stream);
  void begin_layer(const Layer& layer) { layer_ = layer; }

  // ExpertDevice
  void copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) override;
  void wait_copies(uint32_t layer) override;
  void stage(uint32_t layer, std::span<const uint32_t> experts) override;
  void compute(const DeviceGroup& group) override;
  float* cpu_rows(size_t n) override;
  void finish(const DeviceGroup& group, std::span<const int32_t> cpu_slots, const float* rows) override;

  // Device time of this step's groups per layer, added to the executor's
  // timing[layer].device_s, and the device share's time from its copies' issue to its
  // products' end given to executor.observe_device (the learned split); the events are
  // read after the step's final synchronisation.
  void collect_times(TieredExecutor& executor);

 private:
  CudaExpertDevice() = default;

  std::unique_ptr<DeviceExpertCache> cache_;
  uint32_t k_ = 0, n_embd_ = 0, max_tokens_ = 0;
  Layer layer_;
  int staged_buf_ = -1;  // this layer-step's staging buffer, -1: none
  // Pinned (max_tokens * k) ids / (max_tokens, n_embd) normed rows / (max_tokens * k, n_embd) CPU rows.
  int32_t *pin_sel_ = nullptr, *pin_slot_ids_ = nullptr, *pin_row_ids_ = nullptr, *pin_stage_ids_ = nullptr;
  float *pin_h_ = nullptr, *pin_rows_ = nullptr;
  DeviceBuffer slot_ids_dev_, row_ids_dev_, rows_dev_, stage_ids_dev_;
  std::vector<cudaEvent_t> dev_issue_;             // (n_layer) the layer-step's copies issued
  std::vector<cudaEvent_t> dev_begin_, dev_end_;  // (n_layer) the groups' products
  std::vector<bool> dev_timed_;
};

}  // namespace mt::cuda
