// make_cuda_tiering: the tiered GPU path's objects through experts/tiering.h (see the header).
#include "cuda/tiering.h"

#include <algorithm>

#include "core/log.h"
#include "cuda/host_memory.h"
#include "cuda/kernels/matmul.h"
#include "cuda/tiering_device.h"
#include "model/offload.h"

namespace mt::cuda {

namespace {

// Device staging buffers: prefill streaming, and the refused misses of stream mode and
// of hybrid's split, use two.
uint32_t stream_buffers(const CudaTieringOptions& o, const SchedulerOptions& s) {
  return o.stream_threshold > 0 || s.mode == MoeMode::kStream || s.split_misses ? 2 : 0;
}

}  // namespace

void CudaTiering::bound() {
  gpu = static_cast<CudaExpertDevice*>(device.get());
  cache = &gpu->cache();
}

StatusOr<std::unique_ptr<CudaTiering>> make_cuda_tiering(const Model& model, ExpertGeometry geometry, PoolPlan plan,
                                                         const CacheOptions& cache_options,
                                                         const SchedulerOptions& scheduler_options,
                                                         const CudaTieringOptions& options,
                                                         std::unique_ptr<CpuExperts> cpu) {
  const ModelWeights& w = model.weights();
  MT_RETURN_IF_ERROR(check_expert_layers(w, geometry, "GPU tiering"));
  // The host store over the file's bytes (the model's tensors may be interleaved copies
  // for the CPU); expert e of a projection at data + e * bytes.
  const gguf::GgufFile& file = model.file();
  for (const LayerExpertGeometry& l : geometry.layers) {
    const LayerWeights& lw = w.layers[l.layer];
    for (const Tensor* x : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      if (x->present() && file.find_tensor(x->name) == nullptr) {
        return invalid_argument("GPU tiering: no tensor '" + x->name + "' in the file");
      }
    }
  }
  TieringSpec spec;
  spec.geometry = std::move(geometry);
  spec.plan = std::move(plan);
  spec.cache_options = cache_options;
  spec.scheduler_options = scheduler_options;
  spec.n_layer = static_cast<uint32_t>(w.layers.size());
  spec.source = [&w, &file](uint32_t layer, ExpertProj p) {
    const LayerWeights& lw = w.layers[layer];
    const Tensor& x = p == ExpertProj::kGate ? lw.gate_exps : p == ExpertProj::kUp ? lw.up_exps : lw.down_exps;
    if (!x.present()) return ProjSource{};
    return ProjSource{file.tensor_data(*file.find_tensor(x.name)).data(), x.matrix_bytes};
  };
  MT_ASSIGN_OR_RETURN(const PinMode pin_mode, pin_mode_from_env());
  spec.allocator = std::make_unique<CudaPinnedAllocator>(options.pin_limit, pin_mode);
  spec.cpu = std::move(cpu);
  const HParams& hp = model.hparams();
  const uint32_t buffers = stream_buffers(options, scheduler_options);
  spec.make_device = [&hp, buffers, n_layer = spec.n_layer](ExpertTiering& t) -> StatusOr<std::unique_ptr<ExpertDevice>> {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<CudaExpertDevice> d,
                        CudaExpertDevice::create(t.plan, t.scheduler->cache(), *t.store, *t.allocator, buffers, n_layer,
                                                 hp.n_expert_used, hp.n_embd, kHybridMaxTokens));
    return std::unique_ptr<ExpertDevice>(std::move(d));
  };
  spec.pin_budget = options.pin_budget;
  spec.show_progress = !options.pin_background;
  spec.pin_background = options.pin_background;
  auto t = std::make_unique<CudaTiering>();
  t->options = options;
  MT_RETURN_IF_ERROR(build_tiering(std::move(spec), *t));
  if (options.pin_background) {
    log_info("GPU tiering: pinning " + std::to_string(t->pins.pinned.size()) + " of " +
             std::to_string(t->geometry.layers.size()) + " expert layers (" + human_bytes(t->pins.pinned_bytes) +
             ") in the background, the others' copies from pageable memory meanwhile; expert cache " +
             human_bytes(t->plan.used_bytes()) + " in " + std::to_string(t->plan.pools.size()) + " pool(s)");
    return t;
  }
  log_info("GPU tiering: " + std::to_string(t->pins.pinned.size() - t->store->pin_failures().size()) + " of " +
           std::to_string(t->geometry.layers.size()) + " expert layers pinned (" + human_bytes(t->store->pinned_bytes()) +
           ") " + pin_timing_text(t->store->pin_timing()) + ", " + std::to_string(t->store->pin_failures().size()) +
           " refused; expert cache " +
           human_bytes(t->plan.used_bytes()) + " in " + std::to_string(t->plan.pools.size()) + " pool(s)");
  return t;
}

}  // namespace mt::cuda
