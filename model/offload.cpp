#include "model/offload.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "model/expert_rows.h"
#include "model/layers.h"

namespace mt {

SimulatedDevice::SimulatedDevice(const PoolPlan& plan, const ExpertScheduler& scheduler, const ModelWeights& w,
                                 const HostExpertStore& store, StagingRing ring)
    : w_(w), store_(store), ring_(std::move(ring)), slots_(w.layers.size()) {
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

void SimulatedDevice::copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) {
  run([this, layer, expert, slot] {
    const auto t0 = std::chrono::steady_clock::now();
    const ExpertViews& v = slot_views(layer, slot);
    uint8_t* dst = const_cast<uint8_t*>(v.gate.present() ? v.gate.data : v.up.data);
    bytes_copied_ += copy_expert(layer, expert, dst);
    copy_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

void SimulatedDevice::stage(uint32_t layer, std::span<const uint32_t> experts) {
  std::vector<uint32_t> list(experts.begin(), experts.end());
  run([this, layer, list = std::move(list)] {
    const auto t0 = std::chrono::steady_clock::now();
    staged_ = list;
    while (staging_.size() < list.size()) {
      staging_.emplace_back(new uint8_t[staging_bytes_]);
      staging_views_.emplace_back();
    }
    for (size_t i = 0; i < list.size(); ++i) {
      bytes_copied_ += copy_expert(layer, list[i], staging_[i].get());
      staging_views_[i] = views_at(w_.layers[layer], staging_[i].get());
    }
    copy_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

void SimulatedDevice::compute(const DeviceGroup& group) {
  // (the group's spans and the layer's rows stay valid until finish() has waited)
  run([this, group] { run_group(group); });
}

// The device's experts in ascending id, each one run of its selections' rows in token
// order, from its slot or staging buffer; with the shared expert in the same hand-offs.
void SimulatedDevice::run_group(const DeviceGroup& g) {
  const auto t0 = std::chrono::steady_clock::now();
  const Layer& L = layer_;
  const LayerWeights& w = *L.w;
  const size_t E = w.up_exps.ne[0], n_ff = w.up_exps.ne[1], S = g.selected.size();
  const size_t X = w.up_exps.ne[2];
  std::vector<uint32_t> count(X, 0), first(X, 0);
  std::vector<int32_t> view_of(X, -1);  // staged: the buffer index
  for (size_t s = 0; s < S; ++s) {
    if (g.slot[s] >= 0 || g.staged[s] >= 0) ++count[static_cast<uint32_t>(g.selected[s])];
  }
  for (size_t i = 0; i < staged_.size(); ++i) view_of[staged_[i]] = static_cast<int32_t>(i);
  std::vector<ExpertRun> runs;
  uint32_t n = 0;
  for (uint32_t e = 0; e < X; ++e) {
    if (count[e] == 0) continue;
    first[e] = n;
    runs.push_back({nullptr, nullptr, nullptr, 0, n, count[e], e});
    n += count[e];
  }
  in_.resize(n * E);
  g_.resize(n * n_ff);
  u_.resize(n * n_ff);
  d_.resize(n * E);
  std::vector<uint32_t> slot_of_row(n);
  for (size_t s = 0; s < S; ++s) {
    if (g.slot[s] < 0 && g.staged[s] < 0) continue;
    const uint32_t r = first[static_cast<uint32_t>(g.selected[s])]++;
    slot_of_row[r] = static_cast<uint32_t>(s);
    std::copy_n(&L.h[s / g.k * E], E, &in_[r * E]);
  }
  for (ExpertRun& r : runs) {
    const int32_t slot = g.slot[slot_of_row[r.row0]];
    const ExpertViews& v = slot >= 0 ? slot_views(g.layer, slot) : staging_views_[static_cast<size_t>(view_of[r.expert])];
    r.gate = &v.gate, r.up = &v.up, r.down = &v.down;
  }
  const ExpertRows rows{in_.data(), g_.data(), u_.data(), d_.data(), L.h, L.g_sh, L.u_sh, L.d_sh, E, n_ff, L.n_ff_sh,
                        L.n_tokens};
  expert_rows(w, runs, 0, n, L.shared, rows, pool_);
  for (uint32_t r = 0; r < n; ++r) std::copy_n(&d_[r * E], E, &L.out[slot_of_row[r] * E]);
  g.timing->copy_s += copy_s_;
  g.timing->device_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  copy_s_ = 0;
  staged_.clear();
}

float* SimulatedDevice::cpu_rows(size_t n) {
  cpu_rows_.resize(n * layer_.w->up_exps.ne[0]);
  return cpu_rows_.data();
}

void SimulatedDevice::finish(const DeviceGroup&, std::span<const int32_t> cpu_slots, const float* rows) {
  wait();
  const size_t E = layer_.w->up_exps.ne[0];
  for (size_t i = 0; i < cpu_slots.size(); ++i) {
    std::copy_n(&rows[i * E], E, &layer_.out[static_cast<size_t>(cpu_slots[i]) * E]);
  }
}

void ModelCpuExperts::compute(uint32_t layer, const float* h, uint32_t n_tokens, std::span<const ExpertJob> jobs,
                              float* out) {
  expert_outputs(model_.weights().layers[layer], h, n_tokens, model_.hparams().n_embd, jobs, out, model_.pool());
}

Status check_expert_layers(const ModelWeights& w, const ExpertGeometry& geometry, const std::string& what) {
  for (const LayerExpertGeometry& l : geometry.layers) {
    if (l.merged_gate_up) return unimplemented(what + ": layer " + std::to_string(l.layer) + " has merged gate/up experts");
    if (l.layer >= w.layers.size() || !w.layers[l.layer].is_moe()) {
      return invalid_argument(what + ": layer " + std::to_string(l.layer) + " has expert tensors but no router");
    }
    const LayerWeights& lw = w.layers[l.layer];
    const uint64_t bytes = (lw.gate_exps.present() ? lw.gate_exps.matrix_bytes : 0) + lw.up_exps.matrix_bytes +
                           lw.down_exps.matrix_bytes;
    if (bytes != l.bytes_per_expert()) {
      return invalid_argument(what + ": layer " + std::to_string(l.layer) + " expert bytes " + std::to_string(bytes) +
                              " differ from the file's " + std::to_string(l.bytes_per_expert()));
    }
  }
  return {};
}

void OffloadState::bound() {
  sim = static_cast<SimulatedDevice*>(device.get());
  offload = {scheduler.get(), executor.get(), sim};
}

StatusOr<std::unique_ptr<OffloadState>> make_offload(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                     const CacheOptions& cache_options,
                                                     const SchedulerOptions& scheduler_options, uint64_t pin_budget,
                                                     uint64_t pin_limit) {
  const ModelWeights& w = model.weights();
  MT_RETURN_IF_ERROR(check_expert_layers(w, geometry, "offload"));
  uint64_t largest = 0;
  for (const LayerExpertGeometry& l : geometry.layers) largest = std::max(largest, l.bytes_per_expert());
  TieringSpec spec;
  spec.geometry = std::move(geometry);
  spec.plan = std::move(plan);
  spec.cache_options = cache_options;
  spec.scheduler_options = scheduler_options;
  spec.n_layer = static_cast<uint32_t>(w.layers.size());
  // The host store over the tensors the CPU kernels read; matrix e at data + e * bytes.
  spec.source = [&w](uint32_t layer, ExpertProj p) {
    const LayerWeights& lw = w.layers[layer];
    const Tensor& t = p == ExpertProj::kGate ? lw.gate_exps : p == ExpertProj::kUp ? lw.up_exps : lw.down_exps;
    return ProjSource{t.data, t.matrix_bytes};
  };
  spec.allocator = std::make_unique<SimulatedPinnedAllocator>(pin_limit);
  spec.cpu = std::make_unique<ModelCpuExperts>(model);
  spec.make_device = [&w, largest](ExpertTiering& t) -> StatusOr<std::unique_ptr<ExpertDevice>> {
    MT_ASSIGN_OR_RETURN(StagingRing ring, StagingRing::create(*t.allocator, 2, largest));
    return std::unique_ptr<ExpertDevice>(new SimulatedDevice(t.plan, *t.scheduler, w, *t.store, std::move(ring)));
  };
  spec.pin_budget = pin_budget;
  auto s = std::make_unique<OffloadState>();
  MT_RETURN_IF_ERROR(build_tiering(std::move(spec), *s));
  return s;
}

}  // namespace mt
