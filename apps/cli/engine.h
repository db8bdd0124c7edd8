// Engine: the loaded model and where it runs (`--device cpu|cuda`, llama.cpp's `-ngl`),
// seen by the commands as one Backend (backend/backend.h): the CPU model's or the CUDA
// model's. On CUDA every layer is resident on the GPU (partial layer offload is not how
// moetier splits a model: experts are tiered instead).
//
// Expert tiering (--expert-cache) is set up here and only here, for either device:
// enable_tiering() builds the GPU's device cache (cuda/tiering.h) or the CPU's simulated
// device (model/offload.h) and attaches it to the backend.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "apps/cli/tiering_flags.h"
#include "backend/backend.h"
#include "core/status.h"
#include "experts/routing_replay.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace mt {
class CpuBackend;
struct OffloadState;
}  // namespace mt

namespace mt::cli {

struct DeviceFlags {
  std::string device = "cpu";  // cpu | cuda
  int ngl = -1;                // llama.cpp's -ngl: 0 = cpu, >= the layer count (e.g. 99) = cuda
  bool mlock = false;          // --mlock: lock the mapped GGUF in memory (a warning if the limit refuses)
};

void add_device_flags(CLI::App& app, DeviceFlags* f);

// `--routing synth:...|trace:FILE` of run and bench (experts/routing_replay.h): the stream
// checked against the model's MoE geometry. Errors: a model without MoE layers, the
// replay's (one line each).
StatusOr<std::unique_ptr<RoutingReplay>> make_routing_replay(const Model& model, std::string_view value);

// `--cache-policy auto` beside `--routing`: the stream is known before the first token, so
// auto picks as `simulate` does (experts/policy_study.h): a second replay of the same
// value gives the stream's first `warmup` tokens, each candidate policy runs them through
// setup's cache and scheduler, and the best hit rate over the second half is kept in
// setup. Returns the line to show (policy_pick_text), or "" where it does not apply (no
// --routing, or not picks_policy_by_measurement).
StatusOr<std::string> pick_policy_for_replay(const Model& model, std::string_view routing, const TieringFlags& flags,
                                             TieringSetup& setup, uint64_t warmup = 128);

class Engine {
 public:
  // interleave applies to the CPU only (the GPU reads the file's layout). tiered with
  // cuda: the routed experts stay in host memory for enable_tiering(). threads is checked
  // first (common_flags.h: an error past 4x the hardware threads, a warning past them).
  static StatusOr<std::unique_ptr<Engine>> load(const std::string& path, int threads, bool interleave,
                                                const DeviceFlags& device, bool tiered = false);
  ~Engine();

  const Model& model() const { return *model_; }
  // Where every sequence is created and evaluated.
  Backend& backend() { return *backend_; }
  bool on_gpu() const;
  // "cpu (avx2), 16 threads" (the kernel level in use) or "cuda: NVIDIA H200, 17.20 GB of weights".
  std::string describe() const;

  // Tiers the routed experts through a cache of setup's plan. On cuda (a model loaded
  // tiered) the first call pins the host banks (banks.pin_budget bytes; pin_limit refuses
  // pinning past it, to show the pageable fallback) and builds the device cache, and a
  // later call gives a fresh cache and scheduler over the same banks; the backend's
  // sequences made before a call must be gone. On the CPU every call builds a fresh
  // simulated device and host expert store (pin_budget of them simulated pinned).
  Status enable_tiering(const TieringSetup& setup, const BankOptions& banks);
  // The tiering's scheduler and per-layer timing (null before enable_tiering).
  const ExpertScheduler* tiering_scheduler() const;
  const std::vector<LayerTiming>* tiering_timing() const;
  // One line on the host banks: on cuda "host banks: pinned 48 layers (17.1 GB), ...", on
  // the CPU "host experts: 48 layers pinned (17.1 GB), 0 pageable; 0 B through the staging
  // ring" (empty before enable_tiering).
  std::string tiering_summary() const;

  struct Gpu;

 private:
  Engine() = default;
  Status tier_gpu(const TieringSetup& setup, const BankOptions& banks);

  // Declared so that the backend (its sequences) goes first, then the tiering, then the model.
  std::unique_ptr<Model> model_;
  std::unique_ptr<Gpu> gpu_;
  std::unique_ptr<OffloadState> offload_;  // the CPU's tiering
  std::unique_ptr<Backend> backend_;
  CpuBackend* cpu_ = nullptr;  // backend_ on the CPU
};

}  // namespace mt::cli
