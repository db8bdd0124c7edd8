#include "model/offload.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace mt {

SimulatedDevice::SimulatedDevice(const PoolPlan& plan, const ExpertScheduler& scheduler, const ModelWeights& w,
                                 const HostExpertStore& store, StagingRing ring)
    : w_(w), store_(store), ring_(std::move(ring)), slots_(w.layers.size()), timing_(w.layers.size()) {
  for (const ExpertPool& p : plan.pools) pools_.emplace_back(new uint8_t[p.bytes() == 0 ? 1 : p.bytes()]);
  for (uint32_t b = 0; b < w.layers.size(); ++b) {
    const LayerWeights& lw = w.layers[b];
    if (!lw.is_moe()) continue;
    const uint64_t bytes = (lw.gate_exps.present() ? lw.gate_exps.matrix_bytes : 0) + lw.up_exps.matrix_bytes +
                           lw.down_exps.matrix_bytes;
    MT_CHECK(bytes == scheduler.expert_bytes(b));
    staging_bytes_ = std::max(staging_bytes_, bytes);
    const LayerSlots& where = scheduler.cache().slots(b);
    if (where.count == 0) continue;
    MT_CHECK(where.copy_bytes == bytes && where.expert_bytes >= bytes);  // a unified pool's slots may be wider
    uint8_t* base = pools_[static_cast<size_t>(where.pool)].get() + where.first * where.expert_bytes;
    for (uint32_t s = 0; s < where.count; ++s) slots_[b].push_back(views_at(lw, base + s * where.expert_bytes));
  }
  thread_ = std::thread([this] { worker(); });
}

SimulatedDevice::~SimulatedDevice() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

SimulatedDevice::ExpertViews SimulatedDevice::views_at(const LayerWeights& lw, uint8_t* base) const {
  auto view = [](const Tensor& t, uint8_t* at) {
    Tensor v = t;
    v.name.clear();
    v.ne[2] = 1;
    v.data = t.present() ? at : nullptr;
    return v;
  };
  const uint64_t gate_bytes = lw.gate_exps.present() ? lw.gate_exps.matrix_bytes : 0;
  return {view(lw.gate_exps, base), view(lw.up_exps, base + gate_bytes),
          view(lw.down_exps, base + gate_bytes + lw.up_exps.matrix_bytes)};
}

const SimulatedDevice::ExpertViews& SimulatedDevice::slot_views(uint32_t layer, int32_t slot) const {
  MT_CHECK(slot >= 0 && static_cast<size_t>(slot) < slots_[layer].size());
  return slots_[layer][static_cast<size_t>(slot)];
}

uint64_t SimulatedDevice::copy_expert(uint32_t layer, uint32_t expert, uint8_t* dst) {
  const uint64_t bytes = store_.proj_bytes(layer, ExpertProj::kGate) + store_.proj_bytes(layer, ExpertProj::kUp) +
                         store_.proj_bytes(layer, ExpertProj::kDown);
  if (store_.pinned(layer)) {
    std::memcpy(dst, store_.pinned_expert(layer, expert), bytes);
    return bytes;
  }
  // Pageable: gathered into a pinned staging buffer, then one copy to the device.
  const StagingRing::Buffer buf = ring_.acquire();
  MT_CHECK(buf.bytes >= bytes);
  uint8_t* at = buf.data;
  for (int p = 0; p < kExpertProjCount; ++p) {
    const uint64_t n = store_.proj_bytes(layer, static_cast<ExpertProj>(p));
    if (n == 0) continue;
    std::memcpy(at, store_.expert_proj(layer, expert, static_cast<ExpertProj>(p)), n);
    at += n;
  }
  std::memcpy(dst, buf.data, bytes);
  bytes_through_ring_ += bytes;
  return bytes;
}

void SimulatedDevice::copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) {
  const ExpertViews& v = slot_views(layer, slot);
  uint8_t* dst = const_cast<uint8_t*>(v.gate.present() ? v.gate.data : v.up.data);
  bytes_copied_ += copy_expert(layer, expert, dst);
}

const SimulatedDevice::ExpertViews& SimulatedDevice::stage(uint32_t layer, uint32_t expert, size_t i) {
  while (staging_.size() <= i) {
    staging_.emplace_back(new uint8_t[staging_bytes_]);
    staging_views_.emplace_back();
  }
  uint8_t* dst = staging_[i].get();
  bytes_copied_ += copy_expert(layer, expert, dst);
  staging_views_[i] = views_at(w_.layers[layer], dst);
  return staging_views_[i];
}

void SimulatedDevice::run(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void SimulatedDevice::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void SimulatedDevice::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::vector<std::function<void()>> work;
    work.swap(queue_);
    busy_ = true;
    lock.unlock();
    for (auto& fn : work) fn();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace mt

namespace mt {

StatusOr<std::unique_ptr<OffloadState>> make_offload(const ModelWeights& w, ExpertGeometry geometry, PoolPlan plan,
                                                     const CacheOptions& cache_options,
                                                     const SchedulerOptions& scheduler_options, uint64_t pin_budget,
                                                     uint64_t pin_limit) {
  for (const LayerExpertGeometry& l : geometry.layers) {
    if (l.merged_gate_up) return unimplemented("offload: layer " + std::to_string(l.layer) + " has merged gate/up experts");
    if (l.layer >= w.layers.size() || !w.layers[l.layer].is_moe()) {
      return invalid_argument("offload: layer " + std::to_string(l.layer) + " has expert tensors but no router");
    }
    const LayerWeights& lw = w.layers[l.layer];
    const uint64_t bytes = (lw.gate_exps.present() ? lw.gate_exps.matrix_bytes : 0) + lw.up_exps.matrix_bytes +
                           lw.down_exps.matrix_bytes;
    if (bytes != l.bytes_per_expert()) {
      return invalid_argument("offload: layer " + std::to_string(l.layer) + " expert bytes " + std::to_string(bytes) +
                              " differ from the file's " + std::to_string(l.bytes_per_expert()));
    }
  }
  auto s = std::make_unique<OffloadState>();
  s->geometry = std::move(geometry);
  s->plan = std::move(plan);
  s->cache_options = cache_options;
  s->scheduler = std::make_unique<ExpertScheduler>(s->geometry, s->plan, static_cast<uint32_t>(w.layers.size()),
                                                   cache_options, scheduler_options);
  // The host store over the tensors the CPU kernels read; matrix e at data + e * bytes.
  s->store = std::make_unique<HostExpertStore>(s->geometry, [&w](uint32_t layer, ExpertProj p) {
    const LayerWeights& lw = w.layers[layer];
    const Tensor& t = p == ExpertProj::kGate ? lw.gate_exps : p == ExpertProj::kUp ? lw.up_exps : lw.down_exps;
    return ProjSource{t.data, t.matrix_bytes};
  });
  s->allocator = std::make_unique<SimulatedPinnedAllocator>(pin_limit);
  uint64_t largest = 0;
  for (const LayerExpertGeometry& l : s->geometry.layers) largest = std::max(largest, l.bytes_per_expert());
  MT_ASSIGN_OR_RETURN(StagingRing ring, StagingRing::create(*s->allocator, 2, largest));  // before the layers
  s->pins = choose_pinned_layers(s->geometry, pin_budget);
  s->store->pin(s->pins.pinned, *s->allocator);
  s->device = std::make_unique<SimulatedDevice>(s->plan, *s->scheduler, w, *s->store, std::move(ring));
  s->offload = {s->scheduler.get(), s->device.get()};
  return s;
}

}  // namespace mt
