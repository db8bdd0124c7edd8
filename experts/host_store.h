// Host expert store: where every expert's bytes live in host memory.
//
// The source of truth is a view per (layer, projection): expert e of that projection is
// `bytes_per_expert` bytes at base + e * stride. From a GGUF mapping the views are the map
// itself (compact: every layer at its own stride and type, no padding, zero copy). Pinned
// copies, for fast host-to-device transfers, are made per layer while a pin budget and the
// driver allow: one allocation per layer, expert-major, each expert's gate | up | down
// contiguous (so one expert is one contiguous copy into a cache slot):
//   pinned layer: (n_expert, gate_bytes + up_bytes + down_bytes) uint8
// A refused allocation is never silent: the layer stays pageable, the refusal is recorded
// and logged, and later layers are still tried. Pageable layers reach the device through a
// small pinned staging ring.
//
// choose_pinned_layers() decides which layers to pin before anything is loaded, from
// metadata sizes alone (seed 001: exact compact sizes, not max-stride padded ones).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "experts/geometry.h"

namespace mt {

// Expert e of one projection of one layer is at base + e * stride.
struct ProjSource {
  const uint8_t* base = nullptr;
  uint64_t stride = 0;
};
using ProjResolver = std::function<ProjSource(uint32_t layer, ExpertProj p)>;

// Page-locked host memory. allocate_pinned returns nullptr and says why when it cannot.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* allocate_pinned(uint64_t bytes, std::string* why) = 0;
  virtual void free_pinned(void* p, uint64_t bytes) = 0;
  virtual const char* name() const = 0;
  // Two steps for a bank that is filled right after: reserve() may return memory not yet
  // page-locked, and lock_filled() page-locks it once the bytes are in, so the fill's page
  // faults run on the copy threads instead of inside the driver's single-threaded pinning.
  // free_pinned releases either (locked or not). Default: allocate_pinned, nothing to lock.
  virtual void* reserve(uint64_t bytes, std::string* why) { return allocate_pinned(bytes, why); }
  virtual Status lock_filled(void* /*p*/, uint64_t /*bytes*/) { return {}; }
};

// Aligned ordinary host memory standing in for pinned memory (tests, CPU-only builds). A
// byte limit simulates a driver that stops pinning part way, as seed 001's users hit.
class SimulatedPinnedAllocator final : public HostAllocator {
 public:
  static constexpr uint64_t kNoLimit = ~uint64_t{0};
  static constexpr uint64_t kAlignment = 4096;
  explicit SimulatedPinnedAllocator(uint64_t limit_bytes = kNoLimit) : limit_(limit_bytes) {}
  void* allocate_pinned(uint64_t bytes, std::string* why) override;
  void free_pinned(void* p, uint64_t bytes) override;
  const char* name() const override { return "simulated"; }
  uint64_t allocated_bytes() const { return allocated_; }

 private:
  uint64_t limit_;
  uint64_t allocated_ = 0;
};

struct PinFailure {
  uint32_t layer = 0;   // block index
  uint64_t bytes = 0;   // the allocation that was refused
  std::string reason;
};

class HostExpertStore {
 public:
  HostExpertStore(const ExpertGeometry& geometry, const ProjResolver& resolve);
  // Views into a whole GGUF file's bytes (ProjGeometry::offset_in_file). A merged
  // gate_up tensor holds, per expert, the gate rows then the up rows.
  static HostExpertStore from_mapping(const ExpertGeometry& geometry, const uint8_t* file_bytes);

  HostExpertStore(const HostExpertStore&) = delete;
  HostExpertStore& operator=(const HostExpertStore&) = delete;
  HostExpertStore(HostExpertStore&& other) noexcept;
  HostExpertStore& operator=(HostExpertStore&& other) noexcept;
  ~HostExpertStore();

  // Copies each listed MoE layer into one pinned allocation; returns how many layers were
  // pinned by this call. Already pinned layers are skipped. Every call of a store uses the
  // same allocator, which must outlive the store. Refusals go to pin_failures() and the log.
  // The allocations (HostAllocator::reserve) run in order on a thread of their own
  // (page-locking is the driver's work) while `copy_threads` threads copy the layer before,
  // expert by expert, faulting the mapping's pages in parallel (0: the machine's threads, at
  // most kMaxCopyThreads); then lock_filled runs on another thread while the next layer
  // copies, and the layer is published once locked (a refused lock: the layer stays
  // pageable, recorded like a refused allocation).
  uint32_t pin(std::span<const uint32_t> layers, HostAllocator& allocator, bool show_progress = false,
               int copy_threads = 0);
  static constexpr int kMaxCopyThreads = 16;
  // pin() on a thread of its own; returns at once. Each layer switches from its source view
  // to its pinned copy when the copy is complete (expert_proj, pinned and pinned_expert see
  // a layer pageable, then pinned: never a partial copy), so the first tokens run from
  // pageable memory while the rest is pinned. One background pin at a time (MT_CHECK);
  // wait_pinning() joins it (a move does too); the destructor stops it at the next layer
  // (a process that finishes before the pin does not wait for the rest); pin_timing and
  // pin_failures read the last finished pin.
  void pin_in_background(std::vector<uint32_t> layers, HostAllocator& allocator, int copy_threads = 0);
  void wait_pinning();
  bool pinning() const { return pinning_.load(std::memory_order_acquire); }
  // Where the last pin() call's time went: its wall time, the allocator's time (on its own
  // thread) and the time the copies took and waited for an allocation.
  struct PinTiming {
    double wall_s = 0, alloc_s = 0, copy_s = 0, wait_s = 0;
    int copy_threads = 0;
  };
  PinTiming pin_timing() const;

  // The expert's bytes of one projection: the pinned copy if the layer is pinned, else
  // the source view; nullptr for an absent projection (ungated experts have no gate).
  const uint8_t* expert_proj(uint32_t layer, uint32_t expert, ExpertProj p) const;
  uint64_t proj_bytes(uint32_t layer, ExpertProj p) const;
  // One expert's gate | up | down as a single run; only for pinned layers.
  const uint8_t* pinned_expert(uint32_t layer, uint32_t expert) const;
  bool is_moe_layer(uint32_t layer) const;
  bool pinned(uint32_t layer) const;
  uint64_t pinned_bytes() const { return pinned_bytes_.load(std::memory_order_acquire); }
  std::vector<PinFailure> pin_failures() const;
  const ExpertGeometry& geometry() const { return geometry_; }

 private:
  struct Layer {
    const LayerExpertGeometry* geo = nullptr;
    ProjSource source[kExpertProjCount];
    uint8_t* pinned = nullptr;  // (n_expert, bytes_per_expert) when pinned; atomic_ref access
  };
  const Layer& layer(uint32_t block) const;
  static uint8_t* pinned_of(const Layer& l);
  void release();

  ExpertGeometry geometry_;
  std::vector<Layer> layers_;       // geometry_.layers order
  std::vector<int32_t> index_;      // block index -> position in layers_, -1: not MoE
  HostAllocator* allocator_ = nullptr;  // the one pinned copies came from
  std::atomic<uint64_t> pinned_bytes_{0};
  mutable std::mutex pin_mu_;           // failures_ and pin_timing_ (a background pin writes them)
  std::vector<PinFailure> failures_;
  PinTiming pin_timing_;
  std::thread background_;
  std::atomic<bool> pinning_{false};
  std::atomic<bool> stop_pinning_{false};  // the destructor's request: no further layer
};

// "in 4.2 s (page-locking 3.1 s on its own thread, copies 3.9 s on 16 threads)".
std::string pin_timing_text(const HostExpertStore::PinTiming& t);

// A few pinned buffers, handed out round robin, through which pageable experts are copied
// to the device. acquire() returns the next buffer whether or not the copy that last used
// it has finished: the caller fences slot reuse (one event per slot, waited on before the
// slot is written again). n_buffers >= 2 lets one copy fill a buffer while another drains.
class StagingRing {
 public:
  struct Buffer {
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
    uint32_t slot = 0;
  };
  // Fails (never silently) when the allocator refuses a buffer.
  static StatusOr<StagingRing> create(HostAllocator& allocator, uint32_t n_buffers, uint64_t buffer_bytes);

  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  StagingRing(StagingRing&& other) noexcept;
  StagingRing& operator=(StagingRing&& other) noexcept;
  ~StagingRing();

  Buffer acquire();
  uint32_t size() const { return static_cast<uint32_t>(buffers_.size()); }
  uint64_t buffer_bytes() const { return buffer_bytes_; }

 private:
  StagingRing() = default;
  void release();
  HostAllocator* allocator_ = nullptr;
  std::vector<uint8_t*> buffers_;
  uint64_t buffer_bytes_ = 0;
  uint32_t next_ = 0;
};

// Which layers to pin under a byte budget, from compact sizes: layers in ascending bank
// size (ties: lower block index) are pinned while the budget lasts, which pins as many
// layers as any choice could and leaves no pageable layer that would still fit.
struct PinChoice {
  uint64_t budget = 0;
  std::vector<uint32_t> pinned;     // block indices, ascending
  std::vector<uint32_t> pageable;   // block indices, ascending
  uint64_t pinned_bytes = 0;
  // The same budget under padded sizing (every layer at the largest stride of each
  // projection, as seed 001's engine sized its banks): what it would have pinned.
  uint64_t padded_layer_bytes = 0;
  uint32_t padded_pinned_layers = 0;
  uint64_t padded_pinned_bytes = 0;
};

PinChoice choose_pinned_layers(const ExpertGeometry& geometry, uint64_t pin_budget);

}  // namespace mt
