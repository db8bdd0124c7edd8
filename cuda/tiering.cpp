// make_cuda_tiering: the tiered GPU path's objects, built in dependency order (see the header).
#include "cuda/tiering.h"

#include <algorithm>

#include "core/log.h"
#include "cuda/expert_cache.h"
#include "cuda/host_memory.h"

namespace mt::cuda {

namespace {

// Device staging buffers: prefill streaming, and the refused misses of stream mode and
// of hybrid's split, use two.
uint32_t stream_buffers(const CudaTieringOptions& o, const SchedulerOptions& s) {
  return o.stream_threshold > 0 || s.mode == MoeMode::kStream || s.split_misses ? 2 : 0;
}

}  // namespace

CudaTiering::~CudaTiering() {
  cache.reset();  // its copies read the store's pinned banks and the allocator's buffers
  scheduler.reset();
  store.reset();
}

Status CudaTiering::reset() {
  cache.reset();
  scheduler = std::make_unique<ExpertScheduler>(geometry, plan, n_layer, cache_options, scheduler_options);
  MT_ASSIGN_OR_RETURN(cache, DeviceExpertCache::create(plan, scheduler->cache(), *store, *allocator,
                                                      stream_buffers(options, scheduler_options)));
  timing.assign(n_layer, {});
  return {};
}

StatusOr<std::unique_ptr<CudaTiering>> make_cuda_tiering(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                         const CacheOptions& cache_options,
                                                         const SchedulerOptions& scheduler_options,
                                                         const CudaTieringOptions& options) {
  const ModelWeights& w = model.weights();
  for (const LayerExpertGeometry& l : geometry.layers) {
    if (l.merged_gate_up) return unimplemented("GPU tiering: layer " + std::to_string(l.layer) + " has merged gate/up experts");
    if (l.layer >= w.layers.size() || !w.layers[l.layer].is_moe()) {
      return invalid_argument("GPU tiering: layer " + std::to_string(l.layer) + " has expert tensors but no router");
    }
    const LayerWeights& lw = w.layers[l.layer];
    const uint64_t bytes = (lw.gate_exps.present() ? lw.gate_exps.matrix_bytes : 0) + lw.up_exps.matrix_bytes +
                           lw.down_exps.matrix_bytes;
    if (bytes != l.bytes_per_expert()) {
      return invalid_argument("GPU tiering: layer " + std::to_string(l.layer) + " expert bytes " + std::to_string(bytes) +
                              " differ from the file's " + std::to_string(l.bytes_per_expert()));
    }
  }
  auto t = std::make_unique<CudaTiering>();
  t->geometry = std::move(geometry);
  t->plan = std::move(plan);
  t->options = options;
  t->timing.assign(w.layers.size(), {});
  t->cache_options = cache_options;
  t->scheduler_options = scheduler_options;
  t->n_layer = static_cast<uint32_t>(w.layers.size());
  t->scheduler = std::make_unique<ExpertScheduler>(t->geometry, t->plan, t->n_layer, cache_options, scheduler_options);
  // The host store over the file's bytes (the model's tensors may be interleaved copies
  // for the CPU); expert e of a projection at data + e * bytes.
  const gguf::GgufFile& file = model.file();
  for (const LayerExpertGeometry& l : t->geometry.layers) {
    const LayerWeights& lw = w.layers[l.layer];
    for (const Tensor* x : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      if (x->present() && file.find_tensor(x->name) == nullptr) {
        return invalid_argument("GPU tiering: no tensor '" + x->name + "' in the file");
      }
    }
  }
  t->store = std::make_unique<HostExpertStore>(t->geometry, [&w, &file](uint32_t layer, ExpertProj p) {
    const LayerWeights& lw = w.layers[layer];
    const Tensor& x = p == ExpertProj::kGate ? lw.gate_exps : p == ExpertProj::kUp ? lw.up_exps : lw.down_exps;
    if (!x.present()) return ProjSource{};
    return ProjSource{file.tensor_data(*file.find_tensor(x.name)).data(), x.matrix_bytes};
  });
  t->allocator = std::make_unique<CudaPinnedAllocator>(options.pin_limit);
  // The device cache's staging buffers come first, so a pin budget cannot starve them.
  MT_ASSIGN_OR_RETURN(t->cache, DeviceExpertCache::create(t->plan, t->scheduler->cache(), *t->store, *t->allocator,
                                                          stream_buffers(options, scheduler_options)));
  t->pins = choose_pinned_layers(t->geometry, options.pin_budget);
  const uint32_t pinned = t->store->pin(t->pins.pinned, *t->allocator, /*show_progress=*/true);
  log_info("GPU tiering: " + std::to_string(pinned) + " of " + std::to_string(t->geometry.layers.size()) +
           " expert layers pinned (" + human_bytes(t->store->pinned_bytes()) + "), " +
           std::to_string(t->store->pin_failures().size()) + " refused; expert cache " +
           human_bytes(t->plan.used_bytes()) + " in " + std::to_string(t->plan.pools.size()) + " pool(s)");
  return t;
}

}  // namespace mt::cuda
