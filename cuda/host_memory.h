// Host memory as the CUDA backend sees it: page-locked (pinned) allocations for fast
// host-to-device copies, through the tiering core's HostAllocator interface, and the
// device's memory for the planner. A refused pin is never silent: the reason (the CUDA
// error) goes back to the caller, who records and logs it and keeps the layer pageable
// (seed 001's users hit exactly this). Host-only header.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "experts/host_store.h"

namespace mt::cuda {

// cudaHostAlloc. A byte limit refuses allocations past it, as a driver that stops pinning
// part way would (tests and --pin-limit: the fallback to pageable must work and be seen).
class CudaPinnedAllocator final : public HostAllocator {
 public:
  static constexpr uint64_t kNoLimit = ~uint64_t{0};
  explicit CudaPinnedAllocator(uint64_t limit_bytes = kNoLimit) : limit_(limit_bytes) {}
  void* allocate_pinned(uint64_t bytes, std::string* why) override;
  void free_pinned(void* p, uint64_t bytes) override;
  const char* name() const override { return "cudaHostAlloc"; }
  uint64_t allocated_bytes() const { return allocated_; }

 private:
  uint64_t limit_;
  uint64_t allocated_ = 0;
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
