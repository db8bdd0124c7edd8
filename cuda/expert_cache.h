// The device expert cache: the tiering core's pools (experts/pools.h) as device memory.
// One cudaMalloc per pool; slot s of layer b is at pool base + (first + s) * slot bytes
// (experts/cache.h LayerSlots) and holds one expert as the host store keeps it,
// gate | up | down rows back to back in the GGUF layout, so a layer's slots read as
// expert matrices with a stride of one slot:
//   gate_up(b): (n_embd -> 2 n_ff) per slot, gate rows then up rows (when gate and up
//               share type and row bytes; else gate(b) and up(b) separately)
//   down(b):    (n_ff -> n_embd) per slot
// Admissions copy an expert host-to-device on the cache's own copy stream: a pinned
// layer in one copy from its pinned bank, a pageable layer gathered into a pinned staging
// buffer first (double buffered, each buffer fenced by an event before it is refilled).
// The compute stream never waits on a copy it does not need: wait_layer() makes it wait
// only for the copies of that layer issued before the call.
//
// Prefill streaming uses stage_layer(): every expert of a layer copied into one of two
// device staging buffers (expert-major, one expert per slot-sized stride, the same views
// as the slots with n_mat = n_expert), so the grouped GEMM of layer b runs while layer
// b+1 streams in. Host-only header: callers see no CUDA types but the opaque stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "experts/cache.h"
#include "experts/host_store.h"
#include "experts/pools.h"

namespace mt::cuda {

// Views of one layer's experts in device memory (slots or a staging buffer).
struct ExpertViews {
  DeviceMatrix gate, up, down;  // n_mat experts, matrix_bytes = the slot stride
  DeviceMatrix gate_up;         // gate | up per expert as one matrix, or data == nullptr
};

// admit(): admissions, bytes_copied, and of those the bytes gathered through pinned staging
// (pageable layers); stage_layer(): streamed_layers, bytes_streamed; stage_experts():
// staged_experts, bytes_staged.
struct ExpertCacheCounters {
  uint64_t admissions = 0, bytes_copied = 0, bytes_through_ring = 0, streamed_layers = 0, bytes_streamed = 0;
  uint64_t staged_experts = 0, bytes_staged = 0;
};

class DeviceExpertCache {
 public:
  // Allocates every pool of `plan` on the device and builds each MoE layer's slot views
  // from `cache`'s layout and the store's geometry. `staging_allocator` gives the pinned
  // staging buffers for pageable layers. `stream_buffers` > 0 allocates that many device
  // buffers of the largest layer's expert bank for stage_layer() (0: no prefill
  // streaming). Errors: not enough device memory (naming the bytes), a refused pinned
  // staging buffer, a layer whose slot bytes disagree with the store.
  static StatusOr<std::unique_ptr<DeviceExpertCache>> create(const PoolPlan& plan, const ExpertCache& cache,
                                                            const HostExpertStore& store, HostAllocator& staging_allocator,
                                                            uint32_t stream_buffers);
  ~DeviceExpertCache();
  DeviceExpertCache(const DeviceExpertCache&) = delete;
  DeviceExpertCache& operator=(const DeviceExpertCache&) = delete;

  // Layer b's slot views (n_mat = the layer's slot count; all null for a layer without
  // slots or without experts).
  const ExpertViews& slots(uint32_t layer) const;
  // Queues the copy of `expert` of `layer` into its slot on the copy stream. The slot's
  // previous contents must no longer be read by queued work (the scheduler never evicts
  // an expert of the current step; earlier steps finished before the caller learnt this
  // step's routing).
  void admit(uint32_t layer, uint32_t expert, int32_t slot);
  // Makes `compute` wait for every copy into the layer's slots queued so far (no host
  // block; free when they are done).
  void wait_layer(uint32_t layer, cudaStream_t compute);

  // Prefill streaming: queues every expert of `layer` into staging buffer
  // (call count % stream_buffers), after `compute` has finished reading that buffer's
  // previous layer (its release_staged(); never released: everything queued on compute so
  // far), and returns its views (n_mat = n_expert). The caller makes compute wait with
  // wait_staged() before the products that read it.
  const ExpertViews& stage_layer(uint32_t layer, cudaStream_t compute);
  void wait_staged(cudaStream_t compute);
  // Device misses the cache refuses (stream mode, hybrid's split): only the listed
  // experts of `layer` copied into the next staging buffer, each at its own index (the
  // views are stage_layer's), after compute has released that buffer. Returns the buffer; wait_staged / release_staged it.
  int stage_experts(uint32_t layer, std::span<const uint32_t> experts);
  // Marks the end of compute's reads of the last staged buffer (records its fence).
  void release_staged(cudaStream_t compute);
  // The same with the buffer named: stage_layer(layer) returns the buffer it fills, which
  // must have been released since it was last staged (aborts otherwise); staged(buffer)
  // is its views, valid until the buffer is staged again.
  int stage_layer(uint32_t layer);
  void wait_staged(int buffer, cudaStream_t compute);
  const ExpertViews& staged(int buffer) const;
  void release_staged(int buffer, cudaStream_t compute);

  // Blocks the host until every queued copy is done.
  void synchronize();
  const ExpertCacheCounters& counters() const;
  uint64_t device_bytes() const;

  struct Impl;

 private:
  explicit DeviceExpertCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::cuda
