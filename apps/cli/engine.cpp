#include "apps/cli/engine.h"

#include <CLI/CLI.hpp>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "apps/cli/common_flags.h"
#include "core/log.h"
#include "experts/policy_study.h"
#include "cpu/isa.h"
#include "model/cpu_backend.h"
#include "model/offload.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda/expert_cache.h"
#include "cuda/gpu_measure.h"
#include "cuda/tiering.h"
#endif

namespace mt::cli {

#ifdef MOETIER_HAVE_CUDA
// The pool's spin before sleeping in hybrid decode (ThreadPool::set_spin_us): longer than
// a layer's device part, so the workers are awake when the layer's experts arrive.
constexpr int kHybridPoolSpinUs = 1000;

struct Engine::Gpu {
  std::unique_ptr<cuda::CudaModel> model;
  std::unique_ptr<cuda::CudaTiering> tiering;
  bool tiered = false;
  ~Gpu() {
    if (model) model->set_tiering(nullptr);
  }
};
#else
struct Engine::Gpu {};
#endif

Engine::~Engine() = default;

void add_device_flags(CLI::App& app, DeviceFlags* f) {
  app.add_option("--device", f->device, "where the model runs: cpu (default) or cuda (every layer on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--ngl,--n-gpu-layers", f->ngl, "llama.cpp style: 0 = cpu, all layers (e.g. 99) = --device cuda");
  app.add_flag("--mlock", f->mlock, "lock the model file's pages in memory (never paged out; needs ulimit -l)");
}

namespace {

// --mlock: the GGUF's tensor data, locked where the map holds it. A refusal (RLIMIT_MEMLOCK)
// is a warning, as in llama.cpp: the run goes on with the pages unlocked.
void lock_model(const gguf::GgufFile& file) {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const std::span<const uint8_t> d = file.tensor_data(t);
    if (d.empty()) continue;
    if (begin == nullptr || d.data() < begin) begin = d.data();
    if (end == nullptr || d.data() + d.size() > end) end = d.data() + d.size();
  }
  if (begin == nullptr) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  const size_t n = static_cast<size_t>(reinterpret_cast<uintptr_t>(end) - b);
  if (mlock(reinterpret_cast<const void*>(b), n) == 0) {
    log_debug("--mlock: locked " + human_bytes(n) + " of the model file");
    return;
  }
  const int err = errno;
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : human_bytes(lim.rlim_cur);
  log_warn("--mlock: could not lock " + human_bytes(n) + " (" + std::strerror(err) + "; ulimit -l is " + limit +
           "): running with the pages unlocked");
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::load(const std::string& path, int threads, bool interleave,
                                               const DeviceFlags& device, bool tiered) {
  MT_RETURN_IF_ERROR(check_threads(threads));
  bool cuda = device.device == "cuda";
  std::unique_ptr<Engine> e(new Engine());
  if (device.ngl > 0) cuda = true;
  if (device.ngl == 0 && device.device == "cuda") return invalid_argument("-ngl 0 and --device cuda contradict");
  LoadOptions lo{threads, interleave && !cuda};
  if (cuda && tiered && interleave) {  // the CPU's cold experts from interleaved copies
    lo.interleave = true;
    lo.interleave_experts_only = true;
  }
  MT_ASSIGN_OR_RETURN(e->model_, Model::load(path, lo));
  if (device.mlock) lock_model(e->model_->file());
  if (device.ngl > 0 && static_cast<uint32_t>(device.ngl) < e->model_->hparams().n_layer) {
    return invalid_argument("-ngl " + std::to_string(device.ngl) + ": partial layer offload is not supported (" +
                            std::to_string(e->model_->hparams().n_layer) +
                            " layers; give -ngl 99 for all, or tier the experts with --expert-cache)");
  }
  if (!cuda) {
    auto cpu = std::make_unique<CpuBackend>(*e->model_);
    e->cpu_ = cpu.get();
    e->backend_ = std::move(cpu);
    log_debug("engine: " + path + " on " + e->describe());
    return e;
  }
#ifdef MOETIER_HAVE_CUDA
  e->gpu_ = std::make_unique<Gpu>();
  cuda::CudaOptions options;
  options.experts_on_host = tiered;
  e->gpu_->tiered = tiered;
  MT_ASSIGN_OR_RETURN(e->gpu_->model, cuda::CudaModel::load(*e->model_, options));
  if (tiered) {
    // Hybrid decode leaves the CPU pool idle for the device's part of every layer (tens of
    // microseconds): its workers spin through that instead of sleeping and being woken.
    // MOETIER_POOL_SPIN_US overrides (measurements).
    int spin_us = kHybridPoolSpinUs;
    if (const char* v = std::getenv("MOETIER_POOL_SPIN_US"); v != nullptr && *v != '\0') spin_us = std::atoi(v);
    e->model_->pool().set_spin_us(std::max(0, spin_us));
  }
  e->backend_ = std::make_unique<cuda::CudaBackend>(*e->gpu_->model);
  return e;
#else
  return unimplemented("--device cuda: this moetier was built without CUDA");
#endif
}

bool Engine::on_gpu() const { return gpu_ != nullptr; }

StatusOr<std::unique_ptr<RoutingReplay>> make_routing_replay(const Model& model, std::string_view value) {
  const HParams& hp = model.hparams();
  ReplayGeometry g;
  g.n_expert = hp.n_expert;
  g.top_k = hp.n_expert_used;
  const std::vector<LayerWeights>& layers = model.weights().layers;
  for (uint32_t l = 0; l < layers.size(); ++l) {
    if (layers[l].is_moe()) g.moe_blocks.push_back(l);
  }
  if (g.moe_blocks.empty() || g.top_k == 0 || g.top_k > g.n_expert) {
    return invalid_argument("--routing: the model has no routed experts to replay routing on");
  }
  return RoutingReplay::create(value, g);
}

StatusOr<std::string> pick_policy_for_replay(const Model& model, std::string_view routing, const TieringFlags& flags,
                                             TieringSetup& setup, uint64_t warmup) {
  if (routing.empty() || !picks_policy_by_measurement(flags)) return std::string();
  if (warmup < 2) return invalid_argument("pick_policy_for_replay: a warm-up of at least 2 tokens");
  MT_ASSIGN_OR_RETURN(std::unique_ptr<RoutingReplay> stream, make_routing_replay(model, routing));
  const std::vector<LayerWeights>& layers = model.weights().layers;
  const uint32_t top_k = stream->top_k();
  // The warm-up tokens as a trace: one step per token, every MoE block in order, as the
  // engine will consume them one decoded row at a time.
  RoutingTrace trace;
  trace.top_k = top_k;
  trace.n_expert = model.hparams().n_expert;
  std::vector<int32_t> ids(top_k);
  std::vector<float> weights(top_k);
  for (uint64_t t = 0; t < warmup; ++t) {
    for (uint32_t block = 0; block < layers.size(); ++block) {
      if (!layers[block].is_moe()) continue;
      stream->replace(block, 1, ids.data(), weights.data());
      RoutingEvent e;
      e.layer = block, e.pos = static_cast<uint32_t>(t), e.step = t;
      e.experts = ids;
      trace.events.push_back(std::move(e));
      if (t == 0) trace.layers.push_back(block);
    }
  }
  trace.n_steps = trace.n_tokens = warmup;
  const uint32_t n_blocks = setup.geometry.layers.back().layer + 1;
  const StudySetup study{&setup.geometry, &setup.plan, n_blocks, setup.cache, setup.scheduler};
  MT_ASSIGN_OR_RETURN(PolicyPick pick, pick_policy_by_warmup(trace, warmup, study, kAutoPolicyCandidates));
  setup.policy = setup.cache.policy = pick.policy;
  return policy_pick_text(pick);
}

Status Engine::enable_tiering(const TieringSetup& setup, const BankOptions& banks) {
  if (gpu_) return tier_gpu(setup, banks);
  cpu_->set_offload(nullptr);
  offload_.reset();  // the previous pools go before the next are allocated
  MT_ASSIGN_OR_RETURN(offload_, make_offload(*model_, setup.geometry, setup.plan, setup.cache, setup.scheduler,
                                             banks.pin_budget, banks.pin_limit));
  cpu_->set_offload(&offload_->offload);
  return {};
}

Status Engine::tier_gpu(const TieringSetup& setup, const BankOptions& banks) {
#ifdef MOETIER_HAVE_CUDA
  if (!gpu_->tiered) return invalid_argument("GPU tiering needs the model loaded tiered on cuda");
  if (gpu_->tiering) {
    MT_RETURN_IF_ERROR(gpu_->tiering->reset());
    return {};
  }
  cuda::CudaTieringOptions o;
  o.pin_budget = banks.pin_budget;
  o.pin_limit = banks.pin_limit;
  o.stream_threshold = banks.stream_threshold;
  o.pin_background = banks.pin_background;
  SchedulerOptions so = setup.scheduler;
  if (so.split_misses && so.hw.source != "measured") {
    // The split of misses weighs the link against the CPU: with no measured profile, the
    // link is measured here (a quick pinned-copy sweep, well under a second) rather than
    // assumed; the CPU's expert speed stays the profile's.
    auto g = cuda::measure_gpu_profile({0, 2, true});
    if (g.ok()) {
      // Rounded to 5 GB/s: the split (and so which experts the CPU rounds) should not move
      // between two runs of the same command with the link's run-to-run noise.
      for (CopyPoint& c : g->h2d) c.pinned_gbps = std::max(5.0, 5.0 * std::round(c.pinned_gbps / 5.0));
      so.hw.gpu = *g;
      so.hw.has_gpu = true;
      char line[160];
      std::snprintf(line, sizeof line, "split of misses: host-to-device %.1f GB/s pinned (measured), CPU experts %.1f GB/s (%s)",
                    so.hw.h2d_gbps(64ull << 20, true), so.hw.cpu_decode_gbps(QuantType::Q4_K), so.hw.source.c_str());
      log_info(line);
    } else {
      log_warn("split of misses: could not measure the link (" + g.status().message() + "); using the " + so.hw.source +
               " profile");
    }
  }
  MT_ASSIGN_OR_RETURN(gpu_->tiering, cuda::make_cuda_tiering(*model_, setup.geometry, setup.plan, setup.cache, so, o,
                                                                  std::make_unique<ModelCpuExperts>(*model_)));
  gpu_->model->set_tiering(gpu_->tiering.get());
  return {};
#else
  (void)setup, (void)banks;
  return unimplemented("GPU tiering: this moetier was built without CUDA");
#endif
}

const ExpertScheduler* Engine::tiering_scheduler() const {
  if (offload_) return offload_->scheduler.get();
#ifdef MOETIER_HAVE_CUDA
  if (gpu_ && gpu_->tiering) return gpu_->tiering->scheduler.get();
#endif
  return nullptr;
}

const std::vector<LayerTiming>* Engine::tiering_timing() const {
  if (offload_) return &offload_->executor->timing();
#ifdef MOETIER_HAVE_CUDA
  if (gpu_ && gpu_->tiering) return &gpu_->tiering->executor->timing();
#endif
  return nullptr;
}

std::string Engine::tiering_summary() const {
  if (offload_) {
    const OffloadState& o = *offload_;
    const size_t refused = o.store->pin_failures().size();
    return "host experts: " + std::to_string(o.pins.pinned.size() - refused) + " layers pinned (" +
           human_bytes(o.store->pinned_bytes()) + ") " + pin_timing_text(o.store->pin_timing()) + ", " +
           std::to_string(o.pins.pageable.size() + refused) + " pageable; " +
           human_bytes(o.sim->bytes_through_ring()) + " through the staging ring";
  }
#ifdef MOETIER_HAVE_CUDA
  if (gpu_ && gpu_->tiering) {
    const cuda::CudaTiering& t = *gpu_->tiering;
    const cuda::ExpertCacheCounters& c = t.cache->counters();
    const size_t refused = t.store->pin_failures().size();
    const std::string banks =
        t.store->pinning()
            ? "pinning in the background, " + human_bytes(t.store->pinned_bytes()) + " of " +
                  human_bytes(t.pins.pinned_bytes) + " so far"
            : "pinned " + std::to_string(t.pins.pinned.size() - refused) + " layers (" +
                  human_bytes(t.store->pinned_bytes()) + "), pageable " +
                  std::to_string(t.pins.pageable.size() + refused) + " (" + std::to_string(refused) + " refused pins)";
    return "host banks: " + banks + "; device cache " + human_bytes(t.cache->device_bytes()) +
           "; copied " + human_bytes(c.bytes_copied) + " (" + human_bytes(c.bytes_through_ring) +
           " through the staging ring); prefill streamed " + std::to_string(c.streamed_layers) + " layer banks, " +
           human_bytes(c.bytes_streamed);
  }
#endif
  return "";
}

std::string Engine::describe() const {
#ifdef MOETIER_HAVE_CUDA
  if (gpu_ && gpu_->tiered) {
    return "cuda, " + human_bytes(gpu_->model->weight_bytes()) + " of dense weights on the device, experts tiered";
  }
  if (gpu_) return "cuda, " + human_bytes(gpu_->model->weight_bytes()) + " of weights on the device";
#endif
  return std::string("cpu (") + cpu::isa_name(cpu::active_isa()) + "), " + std::to_string(model_->pool().size()) +
         " threads";
}

}  // namespace mt::cli
