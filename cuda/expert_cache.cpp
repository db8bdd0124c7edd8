// DeviceExpertCache (see the header): device pools, slot and staging views, and the copy
// stream that fills them from the host expert store.
#include "cuda/expert_cache.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "cuda/kernels/check.h"
#include "quant/types.h"

namespace mt::cuda {
namespace {

// Pageable bytes gathered per host-to-device copy when a whole layer is staged.
constexpr uint64_t kStageChunkBytes = uint64_t{64} << 20;

std::string bytes_str(uint64_t bytes) {
  return std::to_string(bytes) + " bytes (" + human_bytes(bytes) + ")";
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// A pinned host buffer and the event recorded after the copy that last read it.
struct PinnedStage {
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  cudaEvent_t done = nullptr;
};

// One MoE layer as the device sees it: its geometry and the row bytes of each projection.
struct LayerInfo {
  const LayerExpertGeometry* geo = nullptr;
  uint64_t row_bytes[kExpertProjCount] = {0, 0, 0};
  uint64_t expert_bytes = 0;   // gate + up + down: the staging stride, and what a slot holds
  uint64_t slot_stride = 0;    // the slot stride (> expert_bytes in a unified max-size pool)
  uint8_t* slot_base = nullptr;  // slot 0 of the layer; nullptr without slots
  uint32_t slot_count = 0;
  cudaEvent_t copied = nullptr;  // recorded after the layer's latest admission
  bool has_copy = false;
};

// Checks the layer's projections (dense GGUF rows of a known type) and fills its row bytes.
Status describe_layer(const LayerExpertGeometry& g, LayerInfo* info) {
  info->geo = &g;
  for (int p = 0; p < kExpertProjCount; ++p) {
    const ProjGeometry& pg = g.proj[p];
    if (!pg.present) {
      if (p != static_cast<int>(ExpertProj::kGate)) {
        return invalid_argument("device expert cache: layer " + std::to_string(g.layer) + " has no " +
                                expert_proj_name(static_cast<ExpertProj>(p)) + " experts");
      }
      continue;
    }
    const std::optional<uint64_t> rb = row_bytes(pg.type, pg.n_in);
    if (!rb || *rb * pg.n_out != pg.bytes_per_expert) {
      return invalid_argument("device expert cache: layer " + std::to_string(g.layer) + " " +
                              expert_proj_name(static_cast<ExpertProj>(p)) + ": " +
                              std::to_string(pg.bytes_per_expert) + " bytes per expert are not " +
                              std::to_string(pg.n_out) + " rows of " + std::to_string(pg.n_in) + " " +
                              type_name(pg.type));
    }
    info->row_bytes[p] = *rb;
  }
  info->expert_bytes = g.bytes_per_expert();
  return {};
}

// The layer's experts at base, expert m at base + m * stride (n_mat of them).
ExpertViews views_at(const LayerInfo& l, const uint8_t* base, int64_t n_mat, uint64_t stride) {
  const LayerExpertGeometry& g = *l.geo;
  const auto n_embd = static_cast<int64_t>(g.up().n_in), n_ff = static_cast<int64_t>(g.up().n_out);
  auto view = [&](ExpertProj p, const uint8_t* at, int64_t n_in, int64_t n_out) {
    DeviceMatrix m;
    m.type = g.proj[static_cast<int>(p)].type;
    m.data = at;
    m.n_in = n_in;
    m.n_out = n_out;
    m.n_mat = n_mat;
    m.row_bytes = l.row_bytes[static_cast<int>(p)];
    m.matrix_bytes = stride;
    return m;
  };
  const uint64_t gate_bytes = g.gate().present ? g.gate().bytes_per_expert : 0;
  ExpertViews v;
  if (g.gate().present) v.gate = view(ExpertProj::kGate, base, n_embd, n_ff);  // (n_mat, n_ff, n_embd)
  v.up = view(ExpertProj::kUp, base + gate_bytes, n_embd, n_ff);                 // (n_mat, n_ff, n_embd)
  v.down = view(ExpertProj::kDown, base + gate_bytes + g.up().bytes_per_expert, n_ff, n_embd);  // (n_mat, n_embd, n_ff)
  if (g.gate().present && g.gate().type == g.up().type && l.row_bytes[0] == l.row_bytes[1]) {
    v.gate_up = view(ExpertProj::kGate, base, n_embd, 2 * n_ff);  // (n_mat, 2 n_ff, n_embd)
  }
  return v;
}

}  // namespace

struct DeviceExpertCache::Impl {
  Impl(const HostExpertStore& s, HostAllocator& a) : store(s), allocator(a) {}
  ~Impl();

  // The next pinned staging buffer, once the copy that last read it is done.
  PinnedStage& next_pinned();
  // Expert e of a pageable layer, gate | up | down, gathered at dst on the host.
  void gather(const LayerInfo& l, uint32_t expert, uint8_t* dst) const;
  // Queues every expert of the layer into the next stream buffer; returns its index.
  size_t stage(uint32_t layer);
  size_t next_stage_buffer() const { return stage_calls % stream_buffers.size(); }
  size_t buffer(int b) const;  // checked
  void copy_to_device(void* dst, const void* src, uint64_t bytes) const {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy));
  }

  const HostExpertStore& store;
  HostAllocator& allocator;
  cudaStream_t copy = nullptr;
  std::vector<DeviceBuffer> pools;       // per PoolPlan pool: (slots, expert_bytes) uint8
  std::vector<LayerInfo> layers;         // per block
  std::vector<ExpertViews> slot_views;   // per block
  std::array<PinnedStage, 2> pinned;     // each (max(largest expert, one stage chunk)) uint8
  uint32_t next_pinned_index = 0;

  std::vector<DeviceBuffer> stream_buffers;  // each (n_expert, largest expert bytes) uint8
  std::vector<cudaEvent_t> staged;           // per stream buffer: its copies are done
  std::vector<cudaEvent_t> released;         // per stream buffer: compute's reads are done
  std::vector<uint8_t> unreleased;           // per stream buffer: staged, release_staged not yet called
  std::vector<ExpertViews> staged_views;     // per stream buffer
  uint64_t stage_calls = 0;
  int last_staged = -1;                      // stream buffer of the latest stage_layer

  ExpertCacheCounters counters;
  ExpertViews none;
};

DeviceExpertCache::Impl::~Impl() {
  if (copy != nullptr) MT_CUDA_CHECK(cudaStreamSynchronize(copy));
  for (LayerInfo& l : layers) {
    if (l.copied != nullptr) MT_CUDA_CHECK(cudaEventDestroy(l.copied));
  }
  for (PinnedStage& p : pinned) {
    if (p.done != nullptr) MT_CUDA_CHECK(cudaEventDestroy(p.done));
    if (p.data != nullptr) allocator.free_pinned(p.data, p.bytes);
  }
  for (cudaEvent_t e : staged) MT_CUDA_CHECK(cudaEventDestroy(e));
  for (cudaEvent_t e : released) MT_CUDA_CHECK(cudaEventDestroy(e));
  if (copy != nullptr) MT_CUDA_CHECK(cudaStreamDestroy(copy));
}

PinnedStage& DeviceExpertCache::Impl::next_pinned() {
  PinnedStage& p = pinned[next_pinned_index];
  next_pinned_index = (next_pinned_index + 1) % pinned.size();
  MT_CHECK(p.data != nullptr);
  MT_CUDA_CHECK(cudaEventSynchronize(p.done));  // its previous copy has read it
  return p;
}

void DeviceExpertCache::Impl::gather(const LayerInfo& l, uint32_t expert, uint8_t* dst) const {
  for (int p = 0; p < kExpertProjCount; ++p) {
    const ProjGeometry& pg = l.geo->proj[p];
    if (!pg.present) continue;
    std::memcpy(dst, store.expert_proj(l.geo->layer, expert, static_cast<ExpertProj>(p)), pg.bytes_per_expert);
    dst += pg.bytes_per_expert;
  }
}

StatusOr<std::unique_ptr<DeviceExpertCache>> DeviceExpertCache::create(const PoolPlan& plan, const ExpertCache& cache,
                                                                       const HostExpertStore& store,
                                                                       HostAllocator& staging_allocator,
                                                                       uint32_t stream_buffers) {
  auto impl = std::make_unique<Impl>(store, staging_allocator);
  const auto n_blocks = static_cast<uint32_t>(cache.n_layers());
  impl->layers.resize(n_blocks);
  impl->slot_views.resize(n_blocks);
  uint64_t largest_expert = 0, largest_bank = 0;
  for (const LayerExpertGeometry& g : store.geometry().layers) {
    if (g.layer >= n_blocks) {
      return invalid_argument("device expert cache: layer " + std::to_string(g.layer) + " beyond the cache's " +
                              std::to_string(n_blocks) + " layers");
    }
    MT_RETURN_IF_ERROR(describe_layer(g, &impl->layers[g.layer]));
    largest_expert = std::max(largest_expert, g.bytes_per_expert());
    largest_bank = std::max(largest_bank, g.bank_bytes());
  }
  for (uint32_t b = 0; b < n_blocks; ++b) {
    const LayerSlots& where = cache.slots(b);
    if (where.count == 0) continue;
    const LayerInfo& l = impl->layers[b];
    if (l.geo == nullptr) {
      return invalid_argument("device expert cache: layer " + std::to_string(b) + " has slots but no experts");
    }
    if (where.copy_bytes != l.expert_bytes || where.expert_bytes < l.expert_bytes) {
      return invalid_argument("device expert cache: layer " + std::to_string(b) + " slots hold " +
                              std::to_string(where.expert_bytes) + " bytes, its experts are " +
                              std::to_string(l.expert_bytes) + " (gate + up + down)");
    }
    MT_CHECK(where.pool >= 0 && static_cast<size_t>(where.pool) < plan.pools.size());
    const ExpertPool& pool = plan.pools[static_cast<size_t>(where.pool)];
    MT_CHECK(pool.expert_bytes == where.expert_bytes && where.first + where.count <= pool.slots);
  }

  // Device memory: every pool, then the stream buffers.
  const uint64_t stream_bytes = stream_buffers > 0 ? largest_bank : 0;
  const uint64_t needed = plan.used_bytes() + stream_buffers * stream_bytes;
  size_t free_b = 0, total_b = 0;
  if (const cudaError_t err = cudaMemGetInfo(&free_b, &total_b); err != cudaSuccess) {
    cudaGetLastError();
    return not_found(std::string("device expert cache: cudaMemGetInfo: ") + cudaGetErrorString(err));
  }
  if (needed > free_b) {
    return out_of_range("device expert cache: needs " + bytes_str(needed) + " of device memory, " +
                        bytes_str(free_b) + " free");
  }
  auto allocate = [&](uint64_t bytes, const std::string& what, DeviceBuffer* out) -> Status {
    cudaError_t err = cudaSuccess;
    *out = DeviceBuffer::try_allocate(bytes, &err);
    if (err != cudaSuccess) {
      return out_of_range("device expert cache: cudaMalloc of " + bytes_str(bytes) + " for " + what + " refused: " +
                          cudaGetErrorString(err));
    }
    return {};
  };
  impl->pools.resize(plan.pools.size());
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    MT_RETURN_IF_ERROR(allocate(plan.pools[i].bytes(), "pool " + std::to_string(i), &impl->pools[i]));
  }
  impl->stream_buffers.resize(stream_buffers);
  for (uint32_t i = 0; i < stream_buffers; ++i) {
    MT_RETURN_IF_ERROR(allocate(stream_bytes, "stream buffer " + std::to_string(i), &impl->stream_buffers[i]));
  }

  // Pinned staging: one expert for admissions, up to a chunk of a layer for streaming.
  uint64_t pinned_bytes = largest_expert;
  if (stream_buffers > 0) pinned_bytes = std::max(pinned_bytes, std::min(kStageChunkBytes, largest_bank));
  if (pinned_bytes > 0) {
    for (PinnedStage& p : impl->pinned) {
      std::string why;
      p.data = static_cast<uint8_t*>(staging_allocator.allocate_pinned(pinned_bytes, &why));
      if (p.data == nullptr) {
        return out_of_range("device expert cache: pinned staging buffer of " + bytes_str(pinned_bytes) +
                            " refused by " + staging_allocator.name() + ": " + why);
      }
      p.bytes = pinned_bytes;
      p.done = new_event();
    }
  }

  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->copy, cudaStreamNonBlocking));
  for (uint32_t b = 0; b < n_blocks; ++b) {
    const LayerSlots& where = cache.slots(b);
    if (where.count == 0) continue;
    LayerInfo& l = impl->layers[b];
    l.slot_base = impl->pools[static_cast<size_t>(where.pool)].as<uint8_t>() + where.first * where.expert_bytes;
    l.slot_count = where.count;
    l.slot_stride = where.expert_bytes;
    l.copied = new_event();
    impl->slot_views[b] = views_at(l, l.slot_base, where.count, l.slot_stride);
  }
  for (uint32_t i = 0; i < stream_buffers; ++i) {
    impl->staged.push_back(new_event());
    impl->released.push_back(new_event());
  }
  impl->unreleased.assign(stream_buffers, 0);
  impl->staged_views.resize(stream_buffers);
  return std::unique_ptr<DeviceExpertCache>(new DeviceExpertCache(std::move(impl)));
}

DeviceExpertCache::DeviceExpertCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceExpertCache::~DeviceExpertCache() = default;

const ExpertViews& DeviceExpertCache::slots(uint32_t layer) const {
  return layer < impl_->slot_views.size() ? impl_->slot_views[layer] : impl_->none;
}

void DeviceExpertCache::admit(uint32_t layer, uint32_t expert, int32_t slot) {
  Impl& m = *impl_;
  MT_CHECK(layer < m.layers.size());
  LayerInfo& l = m.layers[layer];
  MT_CHECK(l.geo != nullptr && expert < l.geo->n_expert);
  MT_CHECK(slot >= 0 && static_cast<uint32_t>(slot) < l.slot_count);
  uint8_t* dst = l.slot_base + static_cast<uint64_t>(slot) * l.slot_stride;
  if (m.store.pinned(layer)) {
    m.copy_to_device(dst, m.store.pinned_expert(layer, expert), l.expert_bytes);
  } else {
    PinnedStage& p = m.next_pinned();
    MT_CHECK(p.bytes >= l.expert_bytes);
    m.gather(l, expert, p.data);
    m.copy_to_device(dst, p.data, l.expert_bytes);
    MT_CUDA_CHECK(cudaEventRecord(p.done, m.copy));
    m.counters.bytes_through_ring += l.expert_bytes;
  }
  MT_CUDA_CHECK(cudaEventRecord(l.copied, m.copy));
  l.has_copy = true;
  ++m.counters.admissions;
  m.counters.bytes_copied += l.expert_bytes;
}

void DeviceExpertCache::wait_layer(uint32_t layer, cudaStream_t compute) {
  MT_CHECK(layer < impl_->layers.size());
  const LayerInfo& l = impl_->layers[layer];
  if (l.has_copy) MT_CUDA_CHECK(cudaStreamWaitEvent(compute, l.copied, 0));
}

size_t DeviceExpertCache::Impl::stage(uint32_t layer) {
  MT_CHECK_MSG(!stream_buffers.empty(), "stage_layer without stream buffers");
  MT_CHECK(layer < layers.size());
  const LayerInfo& l = layers[layer];
  MT_CHECK(l.geo != nullptr);
  const size_t i = next_stage_buffer();
  uint8_t* dst = stream_buffers[i].as<uint8_t>();
  const uint64_t bank = l.geo->bank_bytes();
  MT_CHECK(bank <= stream_buffers[i].bytes());
  MT_CUDA_CHECK(cudaStreamWaitEvent(copy, released[i], 0));  // compute is done with its last layer
  if (store.pinned(layer)) {
    copy_to_device(dst, store.pinned_expert(layer, 0), bank);  // the bank is (n_expert, expert_bytes)
  } else {
    const uint32_t per_chunk = static_cast<uint32_t>(
        std::min<uint64_t>(l.geo->n_expert, std::max<uint64_t>(1, pinned[0].bytes / l.expert_bytes)));
    for (uint32_t e0 = 0; e0 < l.geo->n_expert; e0 += per_chunk) {
      const uint32_t n = std::min(per_chunk, l.geo->n_expert - e0);
      PinnedStage& p = next_pinned();
      MT_CHECK(p.bytes >= n * l.expert_bytes);
      for (uint32_t e = 0; e < n; ++e) gather(l, e0 + e, p.data + e * l.expert_bytes);
      copy_to_device(dst + e0 * l.expert_bytes, p.data, n * l.expert_bytes);
      MT_CUDA_CHECK(cudaEventRecord(p.done, copy));
    }
  }
  MT_CUDA_CHECK(cudaEventRecord(staged[i], copy));
  staged_views[i] = views_at(l, dst, l.geo->n_expert, l.expert_bytes);
  unreleased[i] = 1;
  last_staged = static_cast<int>(i);
  ++stage_calls;
  ++counters.streamed_layers;
  counters.bytes_streamed += bank;
  return i;
}

size_t DeviceExpertCache::Impl::buffer(int b) const {
  MT_CHECK_MSG(b >= 0 && static_cast<size_t>(b) < stream_buffers.size(), "not a staging buffer");
  return static_cast<size_t>(b);
}

const ExpertViews& DeviceExpertCache::stage_layer(uint32_t layer, cudaStream_t compute) {
  Impl& m = *impl_;
  MT_CHECK_MSG(!m.stream_buffers.empty(), "stage_layer without stream buffers");
  const size_t i = m.next_stage_buffer();
  // Never released since it was last staged: everything queued on compute so far
  // (correct, without the overlap).
  if (m.unreleased[i] != 0) release_staged(static_cast<int>(i), compute);
  return m.staged_views[m.stage(layer)];
}

int DeviceExpertCache::stage_experts(uint32_t layer, std::span<const uint32_t> experts) {
  Impl& m = *impl_;
  MT_CHECK_MSG(!m.stream_buffers.empty(), "stage_experts without stream buffers");
  MT_CHECK(layer < m.layers.size());
  const LayerInfo& l = m.layers[layer];
  MT_CHECK(l.geo != nullptr);
  const size_t i = m.next_stage_buffer();
  MT_CHECK_MSG(m.unreleased[i] == 0, "staging buffer refilled before release_staged");
  uint8_t* dst = m.stream_buffers[i].as<uint8_t>();
  MT_CHECK(l.geo->bank_bytes() <= m.stream_buffers[i].bytes());
  MT_CUDA_CHECK(cudaStreamWaitEvent(m.copy, m.released[i], 0));
  for (uint32_t e : experts) {
    MT_CHECK(e < l.geo->n_expert);
    uint8_t* at = dst + static_cast<uint64_t>(e) * l.expert_bytes;
    if (m.store.pinned(layer)) {
      m.copy_to_device(at, m.store.pinned_expert(layer, e), l.expert_bytes);
    } else {
      PinnedStage& p = m.next_pinned();
      MT_CHECK(p.bytes >= l.expert_bytes);
      m.gather(l, e, p.data);
      m.copy_to_device(at, p.data, l.expert_bytes);
      MT_CUDA_CHECK(cudaEventRecord(p.done, m.copy));
      m.counters.bytes_through_ring += l.expert_bytes;
    }
    ++m.counters.staged_experts;
    m.counters.bytes_staged += l.expert_bytes;
  }
  MT_CUDA_CHECK(cudaEventRecord(m.staged[i], m.copy));
  m.staged_views[i] = views_at(l, dst, l.geo->n_expert, l.expert_bytes);
  m.unreleased[i] = 1;
  m.last_staged = static_cast<int>(i);
  ++m.stage_calls;
  return static_cast<int>(i);
}

int DeviceExpertCache::stage_layer(uint32_t layer) {
  Impl& m = *impl_;
  MT_CHECK_MSG(!m.stream_buffers.empty(), "stage_layer without stream buffers");
  MT_CHECK_MSG(m.unreleased[m.next_stage_buffer()] == 0, "staging buffer refilled before release_staged");
  return static_cast<int>(m.stage(layer));
}

void DeviceExpertCache::wait_staged(cudaStream_t compute) {
  MT_CHECK_MSG(impl_->last_staged >= 0, "wait_staged before stage_layer");
  wait_staged(impl_->last_staged, compute);
}

void DeviceExpertCache::wait_staged(int buffer, cudaStream_t compute) {
  MT_CUDA_CHECK(cudaStreamWaitEvent(compute, impl_->staged[impl_->buffer(buffer)], 0));
}

const ExpertViews& DeviceExpertCache::staged(int buffer) const { return impl_->staged_views[impl_->buffer(buffer)]; }

void DeviceExpertCache::release_staged(cudaStream_t compute) {
  MT_CHECK_MSG(impl_->last_staged >= 0, "release_staged before stage_layer");
  release_staged(impl_->last_staged, compute);
}

void DeviceExpertCache::release_staged(int buffer, cudaStream_t compute) {
  const size_t i = impl_->buffer(buffer);
  MT_CUDA_CHECK(cudaEventRecord(impl_->released[i], compute));
  impl_->unreleased[i] = 0;
}

void DeviceExpertCache::synchronize() { MT_CUDA_CHECK(cudaStreamSynchronize(impl_->copy)); }

const ExpertCacheCounters& DeviceExpertCache::counters() const { return impl_->counters; }

uint64_t DeviceExpertCache::device_bytes() const {
  uint64_t bytes = 0;
  for (const DeviceBuffer& b : impl_->pools) bytes += b.bytes();
  for (const DeviceBuffer& b : impl_->stream_buffers) bytes += b.bytes();
  return bytes;
}

}  // namespace mt::cuda
