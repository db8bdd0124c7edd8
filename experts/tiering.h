// Expert tiering's objects, built in one place for every device: the geometry and pool
// plan, the pinned host store (through a HostAllocator), the scheduler, the device, the
// CPU's expert code and the executor over them (executor.h). What differs by device is
// injected: where the store reads its bytes, the allocator (simulated or cudaHostAlloc),
// and the device itself, made after the scheduler and store exist and before the layers
// are pinned, so its own pinned staging comes first and a pin budget cannot starve it.
// model/offload.h (the simulated device) and cuda/tiering.h (the GPU) build through it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "experts/executor.h"
#include "experts/geometry.h"
#include "experts/host_store.h"
#include "experts/pools.h"
#include "experts/scheduler.h"

namespace mt {

struct ExpertTiering;
// Makes the device over a tiering's plan, scheduler and store (not yet pinned).
using ExpertDeviceFactory = std::function<StatusOr<std::unique_ptr<ExpertDevice>>(ExpertTiering&)>;

// Everything a tiered model runs through, owned together (destroyed executor first,
// allocator last: the device's copies read the store's pinned banks).
struct ExpertTiering {
  ExpertGeometry geometry;
  PoolPlan plan;
  CacheOptions cache_options;
  SchedulerOptions scheduler_options;
  uint32_t n_layer = 0;
  std::unique_ptr<HostAllocator> allocator;
  std::unique_ptr<HostExpertStore> store;
  PinChoice pins;
  std::unique_ptr<CpuExperts> cpu;
  std::unique_ptr<ExpertScheduler> scheduler;
  std::unique_ptr<ExpertDevice> device;
  std::unique_ptr<TieredExecutor> executor;
  ExpertDeviceFactory make_device;

  // A fresh scheduler, device and executor (empty slots, zero counters and timing) over
  // the same pinned banks: bench's one cache per test without pinning again.
  Status reset();
  // Called when the scheduler, device and executor are made (build_tiering, reset): a
  // derived tiering refreshes what it keeps of them.
  virtual void bound() {}
  virtual ~ExpertTiering();
};

struct TieringSpec {
  ExpertGeometry geometry;
  PoolPlan plan;
  CacheOptions cache_options;
  SchedulerOptions scheduler_options;
  uint32_t n_layer = 0;                       // the model's layers
  ProjResolver source;                        // the host store's views
  std::unique_ptr<HostAllocator> allocator;
  std::unique_ptr<CpuExperts> cpu;
  ExpertDeviceFactory make_device;
  uint64_t pin_budget = 0;                    // host bytes of expert layers to pin
  bool show_progress = false;                 // pinning's progress on a terminal
  bool pin_background = false;                // pin on a thread of its own (the first tokens pageable)
};

inline constexpr int kBackgroundCopyThreads = 4;

// Pinned pages cannot be swapped out: a pin budget past the host's available memory ends
// in the OOM killer instead of a slower run. The budget capped at `available` less a
// reserve for everything else (the larger of 2 GiB and an eighth of it); `why` says so
// when the cap binds. available 0: unknown, no cap.
uint64_t pin_budget_cap(uint64_t budget, uint64_t available, std::string* why);

// Fills `t` (a fresh object, possibly of a derived type) from the spec. Errors: the
// device's (not enough device memory, a refused staging buffer). The pin budget is capped
// by pin_budget_cap at MemAvailable: the layers past it stay pageable, said in the log.
Status build_tiering(TieringSpec spec, ExpertTiering& t);

}  // namespace mt
