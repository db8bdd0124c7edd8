#include "experts/host_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <new>
#include <numeric>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "core/parallel.h"

namespace mt {

void* SimulatedPinnedAllocator::allocate_pinned(uint64_t bytes, std::string* why) {
  if (bytes > limit_ - std::min(limit_, allocated_)) {
    *why = "simulated pin limit: " + human_bytes(allocated_) + " pinned, " + human_bytes(bytes) +
           " more would exceed the limit of " + human_bytes(limit_);
    return nullptr;
  }
  const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    *why = "out of host memory allocating " + human_bytes(bytes);
    return nullptr;
  }
  allocated_ += bytes;
  return p;
}

void SimulatedPinnedAllocator::free_pinned(void* p, uint64_t bytes) {
  if (p == nullptr) return;
  MT_CHECK(bytes <= allocated_);
  allocated_ -= bytes;
  std::free(p);
}

HostExpertStore::HostExpertStore(const ExpertGeometry& geometry, const ProjResolver& resolve) : geometry_(geometry) {
  layers_.resize(geometry_.layers.size());
  for (size_t i = 0; i < geometry_.layers.size(); ++i) {
    const LayerExpertGeometry& g = geometry_.layers[i];
    Layer& l = layers_[i];
    l.geo = &g;
    for (int p = 0; p < kExpertProjCount; ++p) {
      if (!g.proj[p].present) continue;
      l.source[p] = resolve(g.layer, static_cast<ExpertProj>(p));
      MT_CHECK_MSG(l.source[p].base != nullptr, "resolver returned no bytes for a present projection");
      MT_CHECK_MSG(l.source[p].stride >= g.proj[p].bytes_per_expert, "stride below the expert's bytes");
    }
    if (index_.size() <= g.layer) index_.resize(g.layer + 1, -1);
    MT_CHECK_MSG(index_[g.layer] < 0, "layer listed twice in the geometry");
    index_[g.layer] = static_cast<int32_t>(i);
  }
}

HostExpertStore HostExpertStore::from_mapping(const ExpertGeometry& geometry, const uint8_t* file_bytes) {
  // Keyed by block index: the resolver runs while the store copies the geometry.
  std::vector<const LayerExpertGeometry*> by_block;
  for (const LayerExpertGeometry& g : geometry.layers) {
    if (by_block.size() <= g.layer) by_block.resize(g.layer + 1, nullptr);
    by_block[g.layer] = &g;
  }
  return HostExpertStore(geometry, [&](uint32_t layer, ExpertProj p) {
    const LayerExpertGeometry& g = *by_block[layer];
    const ProjGeometry& pg = g.proj[static_cast<int>(p)];
    if (!g.merged_gate_up || p == ExpertProj::kDown) {
      return ProjSource{file_bytes + pg.offset_in_file, pg.bytes_per_expert};
    }
    // One (n_in, 2 * n_ff) matrix per expert: gate rows, then up rows.
    const uint64_t stride = g.gate().bytes_per_expert + g.up().bytes_per_expert;
    const uint64_t skip = p == ExpertProj::kUp ? g.gate().bytes_per_expert : 0;
    return ProjSource{file_bytes + pg.offset_in_file + skip, stride};
  });
}

HostExpertStore::HostExpertStore(HostExpertStore&& other) noexcept { *this = std::move(other); }

HostExpertStore& HostExpertStore::operator=(HostExpertStore&& other) noexcept {
  if (this == &other) return *this;
  wait_pinning();
  other.wait_pinning();
  release();
  // Moving the vector keeps its elements in place, so Layer::geo stays valid.
  geometry_ = std::move(other.geometry_);
  layers_ = std::move(other.layers_);
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i].geo = &geometry_.layers[i];
  index_ = std::move(other.index_);
  allocator_ = std::exchange(other.allocator_, nullptr);
  pinned_bytes_.store(other.pinned_bytes_.exchange(0));
  failures_ = std::move(other.failures_);
  pin_timing_ = other.pin_timing_;
  other.layers_.clear();
  return *this;
}

HostExpertStore::~HostExpertStore() {
  stop_pinning_.store(true, std::memory_order_release);
  wait_pinning();
  release();
}

void HostExpertStore::release() {
  for (Layer& l : layers_) {
    if (l.pinned == nullptr) continue;
    allocator_->free_pinned(l.pinned, l.geo->bank_bytes());
    l.pinned = nullptr;
  }
  pinned_bytes_ = 0;
}

uint8_t* HostExpertStore::pinned_of(const Layer& l) {
  // Written once (null -> the complete copy) by the pinning thread, read by any.
  return std::atomic_ref<uint8_t*>(const_cast<Layer&>(l).pinned).load(std::memory_order_acquire);
}

HostExpertStore::PinTiming HostExpertStore::pin_timing() const {
  std::lock_guard<std::mutex> lock(pin_mu_);
  return pin_timing_;
}

std::vector<PinFailure> HostExpertStore::pin_failures() const {
  std::lock_guard<std::mutex> lock(pin_mu_);
  return failures_;
}

void HostExpertStore::pin_in_background(std::vector<uint32_t> layers, HostAllocator& allocator, int copy_threads) {
  MT_CHECK_MSG(!background_.joinable(), "one background pin at a time");
  MT_CHECK_MSG(allocator_ == nullptr || allocator_ == &allocator, "pinned copies must come from one allocator");
  pinning_.store(true, std::memory_order_release);
  background_ = std::thread([this, layers = std::move(layers), &allocator, copy_threads] {
    const uint32_t n = pin(layers, allocator, false, copy_threads);
    pinning_.store(false, std::memory_order_release);
    log_info("pinned in the background: " + std::to_string(n) + " expert layers (" + human_bytes(pinned_bytes()) + ") " +
             pin_timing_text(pin_timing()) + ", " + std::to_string(pin_failures().size()) + " refused");
  });
}

void HostExpertStore::wait_pinning() {
  if (background_.joinable()) background_.join();
}

const HostExpertStore::Layer& HostExpertStore::layer(uint32_t block) const {
  MT_CHECK_MSG(is_moe_layer(block), "not a MoE layer of this store");
  return layers_[static_cast<size_t>(index_[block])];
}

bool HostExpertStore::is_moe_layer(uint32_t layer) const { return layer < index_.size() && index_[layer] >= 0; }

bool HostExpertStore::pinned(uint32_t block) const { return pinned_of(layer(block)) != nullptr; }

uint64_t HostExpertStore::proj_bytes(uint32_t block, ExpertProj p) const {
  return layer(block).geo->proj[static_cast<int>(p)].bytes_per_expert;
}

const uint8_t* HostExpertStore::pinned_expert(uint32_t block, uint32_t expert) const {
  const Layer& l = layer(block);
  uint8_t* bank = pinned_of(l);
  MT_CHECK(bank != nullptr && expert < l.geo->n_expert);
  return bank + static_cast<uint64_t>(expert) * l.geo->bytes_per_expert();
}

const uint8_t* HostExpertStore::expert_proj(uint32_t block, uint32_t expert, ExpertProj p) const {
  const Layer& l = layer(block);
  MT_CHECK(expert < l.geo->n_expert);
  const int pi = static_cast<int>(p);
  if (!l.geo->proj[pi].present) return nullptr;
  if (pinned_of(l) != nullptr) {
    uint64_t offset = 0;
    for (int q = 0; q < pi; ++q) offset += l.geo->proj[q].bytes_per_expert;
    return pinned_expert(block, expert) + offset;
  }
  return l.source[pi].base + static_cast<uint64_t>(expert) * l.source[pi].stride;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The pinned banks of pin()'s layers, allocated in order on a thread of their own and
// handed to the copying thread one by one (null: refused, with the reason).
class BankAllocations {
 public:
  BankAllocations(std::vector<uint64_t> bytes, HostAllocator& allocator, const std::atomic<bool>& stop)
      : bytes_(std::move(bytes)), got_(bytes_.size()), why_(bytes_.size()), allocator_(allocator) {
    thread_ = std::thread([this, &stop] {
      for (size_t i = 0; i < bytes_.size() && !stop.load(std::memory_order_acquire); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string why;
        auto* p = static_cast<uint8_t*>(allocator_.reserve(bytes_[i], &why));
        if (p == nullptr && why.empty()) why = "allocator gave no reason";
        std::lock_guard<std::mutex> lock(mu_);
        alloc_s_ += seconds_since(t0);
        got_[i] = p;
        why_[i] = std::move(why);
        ready_ = i + 1;
        cv_.notify_one();
      }
    });
  }
  // Joins the allocating thread and frees what nobody took (a pin stopped part way).
  ~BankAllocations() {
    thread_.join();
    for (size_t i = taken_; i < got_.size(); ++i) {
      if (got_[i] != nullptr) allocator_.free_pinned(got_[i], bytes_[i]);
    }
  }
  BankAllocations(const BankAllocations&) = delete;
  BankAllocations& operator=(const BankAllocations&) = delete;

  // Layer i's bank once allocated (null: refused, `why` says why); i in order, each once.
  uint8_t* wait(size_t i, std::string* why) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_ > i; });
    taken_ = i + 1;
    *why = why_[i];
    return got_[i];
  }
  void add_alloc_s(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    alloc_s_ += s;
  }
  double alloc_s() {
    std::lock_guard<std::mutex> lock(mu_);
    return alloc_s_;
  }

 private:
  std::vector<uint64_t> bytes_;
  std::vector<uint8_t*> got_;
  std::vector<std::string> why_;
  HostAllocator& allocator_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0, taken_ = 0;
  double alloc_s_ = 0;
  std::thread thread_;
};

}  // namespace

uint32_t HostExpertStore::pin(std::span<const uint32_t> blocks, HostAllocator& allocator, bool show_progress,
                              int copy_threads) {
  MT_CHECK_MSG(allocator_ == nullptr || allocator_ == &allocator, "pinned copies must come from one allocator");
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0;
  std::vector<uint32_t> todo;  // the blocks not pinned yet, in the caller's order
  std::vector<uint64_t> bank_bytes;
  for (uint32_t b : blocks) {
    const Layer& l = layer(b);
    total += l.geo->bank_bytes();
    if (pinned_of(l) != nullptr) continue;
    todo.push_back(b);
    bank_bytes.push_back(l.geo->bank_bytes());
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::clamp(copy_threads > 0 ? copy_threads : hw, 1, kMaxCopyThreads);
  PinTiming timing;
  timing.copy_threads = threads;
  Progress progress("pinning experts", total, show_progress);
  uint64_t done = total - std::accumulate(bank_bytes.begin(), bank_bytes.end(), uint64_t{0});
  uint32_t pinned_now = 0;
  auto refuse = [&](uint32_t b, uint64_t bytes, const std::string& why) {
    log_warn(std::string("pinning layer ") + std::to_string(b) + " (" + human_bytes(bytes) + ") with the " +
             allocator.name() + " allocator failed: " + why + "; the layer stays pageable");
    std::lock_guard<std::mutex> lock(pin_mu_);
    failures_.push_back({b, bytes, why});
  };
  {
    BankAllocations banks(bank_bytes, allocator, stop_pinning_);
    ThreadPool pool(threads);
    // The layer being page-locked (lock_filled) while the next one copies; published once
    // its lock returns.
    struct Locking {
      std::future<Status> status;
      size_t i = 0;
      uint8_t* dst = nullptr;
    } locking;
    auto finish_locking = [&] {
      if (!locking.status.valid()) return;
      const Status st = locking.status.get();
      const uint32_t b = todo[locking.i];
      if (!st.ok()) {
        allocator.free_pinned(locking.dst, bank_bytes[locking.i]);
        refuse(b, bank_bytes[locking.i], st.message());
        return;
      }
      Layer& l = layers_[static_cast<size_t>(index_[b])];
      std::atomic_ref<uint8_t*>(l.pinned).store(locking.dst, std::memory_order_release);  // copied and locked first
      pinned_bytes_ += bank_bytes[locking.i];
      ++pinned_now;
    };
    for (size_t i = 0; i < todo.size() && !stop_pinning_.load(std::memory_order_acquire); ++i) {
      const uint32_t b = todo[i];
      Layer& l = layers_[static_cast<size_t>(index_[b])];
      const LayerExpertGeometry& g = *l.geo;
      const auto wait0 = std::chrono::steady_clock::now();
      std::string why;
      uint8_t* dst = banks.wait(i, &why);
      timing.wait_s += seconds_since(wait0);
      done += bank_bytes[i];
      if (dst == nullptr) {
        refuse(b, bank_bytes[i], why);
        continue;
      }
      allocator_ = &allocator;
      const uint64_t per_expert = g.bytes_per_expert();
      const auto copy0 = std::chrono::steady_clock::now();
      // dst: (n_expert, bytes_per_expert) uint8, each expert's projections in order.
      pool.parallel_for(g.n_expert, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) {
          uint8_t* out = dst + static_cast<uint64_t>(e) * per_expert;
          for (int p = 0; p < kExpertProjCount; ++p) {
            const uint64_t n = g.proj[p].bytes_per_expert;
            if (!g.proj[p].present || n == 0) continue;
            std::memcpy(out, l.source[p].base + static_cast<uint64_t>(e) * l.source[p].stride, n);
            out += n;
          }
        }
      }, 1);
      timing.copy_s += seconds_since(copy0);
      finish_locking();
      const uint64_t bytes = bank_bytes[i];
      locking = {std::async(std::launch::async, [&allocator, &banks, dst, bytes] {
                   const auto lock0 = std::chrono::steady_clock::now();
                   Status st = allocator.lock_filled(dst, bytes);
                   banks.add_alloc_s(seconds_since(lock0));
                   return st;
                 }),
                 i, dst};
      progress.update(done);
    }
    finish_locking();
    timing.alloc_s = banks.alloc_s();
  }
  progress.finish();
  timing.wall_s = seconds_since(t0);
  std::lock_guard<std::mutex> lock(pin_mu_);
  pin_timing_ = timing;
  return pinned_now;
}

std::string pin_timing_text(const HostExpertStore::PinTiming& t) {
  char line[160];
  std::snprintf(line, sizeof line, "in %.1f s (page-locking %.1f s on its own thread, copies %.1f s on %d threads)",
                t.wall_s, t.alloc_s, t.copy_s, t.copy_threads);
  return line;
}

StatusOr<StagingRing> StagingRing::create(HostAllocator& allocator, uint32_t n_buffers, uint64_t buffer_bytes) {
  if (n_buffers == 0 || buffer_bytes == 0) return invalid_argument("staging ring needs at least one non-empty buffer");
  StagingRing ring;
  ring.allocator_ = &allocator;
  ring.buffer_bytes_ = buffer_bytes;
  for (uint32_t i = 0; i < n_buffers; ++i) {
    std::string why;
    auto* p = static_cast<uint8_t*>(allocator.allocate_pinned(buffer_bytes, &why));
    if (p == nullptr) {
      return out_of_range("pinned staging buffer " + std::to_string(i) + " of " + std::to_string(n_buffers) + " (" +
                          human_bytes(buffer_bytes) + ") refused by the " + allocator.name() + " allocator: " + why);
    }
    ring.buffers_.push_back(p);
  }
  return ring;
}

StagingRing::StagingRing(StagingRing&& other) noexcept { *this = std::move(other); }

StagingRing& StagingRing::operator=(StagingRing&& other) noexcept {
  if (this == &other) return *this;
  release();
  allocator_ = std::exchange(other.allocator_, nullptr);
  buffers_ = std::move(other.buffers_);
  other.buffers_.clear();
  buffer_bytes_ = other.buffer_bytes_;
  next_ = other.next_;
  return *this;
}

StagingRing::~StagingRing() { release(); }

void StagingRing::release() {
  for (uint8_t* p : buffers_) allocator_->free_pinned(p, buffer_bytes_);
  buffers_.clear();
}

StagingRing::Buffer StagingRing::acquire() {
  MT_CHECK(!buffers_.empty());
  const uint32_t slot = next_;
  next_ = (next_ + 1) % size();
  return {buffers_[slot], buffer_bytes_, slot};
}

PinChoice choose_pinned_layers(const ExpertGeometry& geometry, uint64_t pin_budget) {
  PinChoice c;
  c.budget = pin_budget;
  std::vector<size_t> order(geometry.layers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const LayerExpertGeometry& x = geometry.layers[a];
    const LayerExpertGeometry& y = geometry.layers[b];
    return x.bank_bytes() != y.bank_bytes() ? x.bank_bytes() < y.bank_bytes() : x.layer < y.layer;
  });
  size_t i = 0;
  for (; i < order.size(); ++i) {
    const LayerExpertGeometry& g = geometry.layers[order[i]];
    if (g.bank_bytes() > pin_budget - c.pinned_bytes) break;  // every later layer is as large
    c.pinned_bytes += g.bank_bytes();
    c.pinned.push_back(g.layer);
  }
  for (; i < order.size(); ++i) c.pageable.push_back(geometry.layers[order[i]].layer);
  std::sort(c.pinned.begin(), c.pinned.end());
  std::sort(c.pageable.begin(), c.pageable.end());

  c.padded_layer_bytes = (geometry.max_bytes[0] + geometry.max_bytes[1] + geometry.max_bytes[2]) * geometry.n_expert;
  if (c.padded_layer_bytes > 0) {
    c.padded_pinned_layers =
        static_cast<uint32_t>(std::min<uint64_t>(pin_budget / c.padded_layer_bytes, geometry.layers.size()));
  }
  c.padded_pinned_bytes = c.padded_pinned_layers * c.padded_layer_bytes;
  return c;
}

}  // namespace mt
