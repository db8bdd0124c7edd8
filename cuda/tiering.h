// GPU expert tiering: a model whose routed experts stay in host memory runs on the GPU
// with the tiering core (experts/) deciding, per MoE layer-step, where each selected
// expert is computed. Everything else (attention, routers, norms, shared experts, the
// KV cache) is resident.
//
//   decode (a batch below stream_threshold tokens, run kHybridMaxTokens tokens at a time;
//     a batch of sequences' decode tokens is one layer-step, its union of experts placed
//     once, each expert read once for all its tokens): the
//     tiered-expert executor (experts/executor.h) over the GPU device
//     (cuda/tiering_device.h): the routing to the host (ids + normed rows, a few KB), the
//     scheduler's placement, hot experts in one grouped product over their cache slots
//     (cuda/expert_cache.h) on the compute stream, admissions copied on the copy stream
//     (used from the next step on: the compute stream never waits for them now), cold
//     experts computed on CPU threads from the host copy at the same time (the model's
//     CPU experts, handed in as the executor's CpuExperts), their rows uploaded into the
//     same (T*K, n_embd) buffer, so the weighted sum runs in rank order exactly as the
//     resident path's
//   prefill (a batch of stream_threshold tokens or more): every MoE layer's whole expert
//     bank streams through two device buffers (pinned banks: one copy per layer), layer
//     l+1's copy overlapped with layer l's grouped GEMM; router, top-k and the token
//     bucketing stay on the device as in the resident path. A prompt is one micro-batch
//     up to CudaModel::kStreamMicroBatch tokens, so each bank is uploaded once.
// Built through experts/tiering.h's one construction path (the simulated device's too),
// with the GPU device and cudaHostAlloc injected. Telemetry: the scheduler's counters
// (experts/stats.h) and the executor's per-layer CPU / device time, as run --stats and
// bench's JSON report them.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "experts/executor.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "experts/scheduler.h"
#include "experts/tiering.h"
#include "model/model.h"

namespace mt::cuda {

// Rows of one hybrid layer-step (a batch below the streaming threshold is cut into passes
// of at most this many): the executor's pinned and device buffers are sized for it.
inline constexpr uint32_t kHybridMaxTokens = 64;

class CudaExpertDevice;
class DeviceExpertCache;

struct CudaTieringOptions {
  uint64_t pin_budget = ~uint64_t{0};  // host bytes of expert layers to pin (default: all)
  uint64_t pin_limit = ~uint64_t{0};   // refuse pinned allocations past this many bytes (tests)
  uint32_t stream_threshold = 64;      // batch from which prefill streams whole layers (0: never)
  bool pin_background = false;         // pin while the first tokens run from pageable banks
};

// Everything the tiered GPU path needs, owned together (experts/tiering.h ExpertTiering).
struct CudaTiering final : ExpertTiering {
  CudaTieringOptions options;
  CudaExpertDevice* gpu = nullptr;     // == device
  DeviceExpertCache* cache = nullptr;  // the GPU device's
  void bound() override;
};

// The store over `model`'s expert tensors (the file's bytes), its layers pinned while the
// pin budget and the driver allow (refusals logged, the layer stays pageable), the
// scheduler over the plan's pools, the GPU device with two prefill streaming buffers,
// `cpu` (the model's CPU experts: model/offload.h ModelCpuExperts) for the CPU's share.
// Errors: merged gate/up experts, tensors whose bytes disagree with the geometry, not
// enough device memory for the pools.
StatusOr<std::unique_ptr<CudaTiering>> make_cuda_tiering(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                         const CacheOptions& cache_options,
                                                         const SchedulerOptions& scheduler_options,
                                                         const CudaTieringOptions& options,
                                                         std::unique_ptr<CpuExperts> cpu);

}  // namespace mt::cuda
