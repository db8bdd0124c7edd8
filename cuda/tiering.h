// GPU expert tiering: a model whose routed experts stay in host memory runs on the GPU
// with the tiering core (experts/) deciding, per MoE layer-step, where each selected
// expert is computed. Everything else (attention, routers, norms, shared experts, the
// KV cache) is resident.
//
//   decode (a batch below stream_threshold tokens, run 8 tokens at a time):
//     GPU: norm, router, top-k ──ids + normed rows (a few KB)──► host: ExpertScheduler.place
//     hot experts: one grouped product over their cache slots (cuda/expert_cache.h) on the
//       compute stream; misses the policy admits are copied into slots on the copy stream,
//       used from the next step on (the compute stream never waits for them now)
//     cold experts: computed on CPU threads from the host copy at the same time
//       (model/layers.h expert_outputs), their rows uploaded into the same (T*K, n_embd)
//       buffer, so the weighted sum runs in rank order exactly as the resident path's
//   prefill (a batch of stream_threshold tokens or more): every MoE layer's whole expert
//     bank streams through two device buffers (pinned banks: one copy per layer), layer
//     l+1's copy overlapped with layer l's grouped GEMM; router, top-k and the token
//     bucketing stay on the device as in the resident path. A prompt is one micro-batch
//     up to CudaModel::kStreamMicroBatch tokens, so each bank is uploaded once.
// Telemetry: the scheduler's counters (experts/stats.h) and per-layer copy / device / CPU
// time, as run --stats and bench's JSON report them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "experts/geometry.h"
#include "experts/host_store.h"
#include "experts/pools.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "model/model.h"

namespace mt::cuda {

class DeviceExpertCache;

struct CudaTieringOptions {
  uint64_t pin_budget = ~uint64_t{0};  // host bytes of expert layers to pin (default: all)
  uint64_t pin_limit = ~uint64_t{0};   // refuse pinned allocations past this many bytes (tests)
  uint32_t stream_threshold = 64;      // batch from which prefill streams whole layers (0: never)
};

// Everything the tiered GPU path needs, owned together. Built by make_cuda_tiering.
struct CudaTiering {
  ExpertGeometry geometry;
  PoolPlan plan;
  CudaTieringOptions options;
  std::unique_ptr<HostAllocator> allocator;   // cudaHostAlloc, limited by pin_limit
  std::unique_ptr<HostExpertStore> store;
  PinChoice pins;
  std::unique_ptr<ExpertScheduler> scheduler;
  std::unique_ptr<DeviceExpertCache> cache;
  std::vector<LayerTiming> timing;            // (n_layer) copy, device and CPU time
  CacheOptions cache_options;
  SchedulerOptions scheduler_options;
  uint32_t n_layer = 0;

  // A fresh scheduler and device cache (empty slots, zero counters and timing) over the
  // same pinned banks: bench's one cache per test without pinning again.
  Status reset();
  ~CudaTiering();
};

// The store over `model`'s expert tensors (loaded with interleave off), its layers pinned
// while the pin budget and the driver allow (refusals logged, the layer stays pageable),
// the scheduler over the plan's pools, the device cache with two prefill streaming
// buffers. Errors: merged gate/up experts, tensors whose bytes disagree with the
// geometry, not enough device memory for the pools.
StatusOr<std::unique_ptr<CudaTiering>> make_cuda_tiering(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                         const CacheOptions& cache_options,
                                                         const SchedulerOptions& scheduler_options,
                                                         const CudaTieringOptions& options);

}  // namespace mt::cuda
