// Host memory as the CUDA backend sees it: page-locked (pinned) allocations for fast
// host-to-device copies, through the tiering core's HostAllocator interface, and the
// device's memory for the planner. A refused pin is never silent: the reason (the CUDA
// error) goes back to the caller, who records and logs it and keeps the layer pageable
// (seed 001's users hit exactly this). Host-only header.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "experts/host_store.h"

namespace mt::cuda {

// Page-locked host memory through the CUDA driver, in one of two ways (PinMode):
//   kAlloc     cudaHostAlloc: the driver allocates, zero-fills and locks in one call, on
//              one thread (H100 host, 16.35 GiB: 6.1-8.5 s), holding the driver meanwhile;
//   kRegister  reserve() maps anonymous memory (transparent huge pages asked for), the
//              caller's copy threads fill it (the page faults run in parallel) and
//              lock_filled() page-locks it with cudaHostRegister.
// allocate_pinned (staging buffers and anything not filled at once) locks at once in both.
// A byte limit refuses allocations past it, as a driver that stops pinning part way would
// (tests and --pin-limit: the fallback to pageable must work and be seen). Thread-safe.
enum class PinMode { kAlloc, kRegister };
// MOETIER_PIN_MODE=alloc|register (unset: kRegister: on an H100 host 16.35 GiB pinned in
// 0.6-0.7 s against 5.4-6.5 s with cudaHostAlloc, docs/PERFORMANCE.md); other values: an
// error naming them.
StatusOr<PinMode> pin_mode_from_env();

class CudaPinnedAllocator final : public HostAllocator {
 public:
  static constexpr uint64_t kNoLimit = ~uint64_t{0};
  explicit CudaPinnedAllocator(uint64_t limit_bytes = kNoLimit, PinMode mode = PinMode::kAlloc)
      : limit_(limit_bytes), mode_(mode) {}
  ~CudaPinnedAllocator() override;
  void* allocate_pinned(uint64_t bytes, std::string* why) override;
  void free_pinned(void* p, uint64_t bytes) override;
  void* reserve(uint64_t bytes, std::string* why) override;
  Status lock_filled(void* p, uint64_t bytes) override;
  const char* name() const override { return mode_ == PinMode::kAlloc ? "cudaHostAlloc" : "cudaHostRegister"; }
  uint64_t allocated_bytes() const;

 private:
  bool take(uint64_t bytes, std::string* why);  // the limit's accounting
  uint64_t limit_;
  PinMode mode_;
  mutable std::mutex mu_;
  uint64_t allocated_ = 0;
  struct Mapping {
    uint64_t bytes = 0;
    bool registered = false;
  };
  std::unordered_map<void*, Mapping> mapped_;  // reserve()'s mappings
};

// Page-locks an existing range (e.g. part of the GGUF mapping) in place; the reason on failure.
Status register_host_range(void* p, uint64_t bytes);
void unregister_host_range(void* p);

struct DeviceMemory {
  std::string name;
  uint64_t total = 0, free = 0;
  int sm = 0;  // major * 10 + minor
};
// Device `device`'s memory (not_found without a device).
StatusOr<DeviceMemory> device_memory(int device = 0);

}  // namespace mt::cuda
