// Engine: the loaded model and where it runs (`--device cpu|cuda`, llama.cpp's `-ngl`),
// handing out one Evaluator per sequence. On CUDA every layer is resident on the GPU
// (partial layer offload is not how moetier splits a model: experts are tiered instead).
#pragma once

#include <memory>
#include <string>

#include "apps/cli/tiering_flags.h"
#include "core/status.h"
#include "experts/scheduler.h"
#include "experts/stats.h"
#include "model/evaluator.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace mt::cli {

struct DeviceFlags {
  std::string device = "cpu";  // cpu | cuda
  int ngl = -1;                // llama.cpp's -ngl: 0 = cpu, >= the layer count (e.g. 99) = cuda
};

void add_device_flags(CLI::App& app, DeviceFlags* f);

class Engine {
 public:
  // interleave applies to the CPU only (the GPU reads the file's layout). tiered with
  // cuda: the routed experts stay in host memory for tier_gpu().
  static StatusOr<std::unique_ptr<Engine>> load(const std::string& path, int threads, bool interleave,
                                                const DeviceFlags& device, bool tiered = false);
  ~Engine();

  const Model& model() const { return *model_; }
  bool on_gpu() const;
  // "cpu, 16 threads" or "cuda: NVIDIA H200, 17.20 GB of weights".
  std::string describe() const;
  StatusOr<std::unique_ptr<Evaluator>> new_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16) const;

  // GPU expert tiering (cuda/tiering.h) for a model loaded tiered on cuda: the first call
  // pins the host banks (pin_budget bytes; pin_limit refuses pinning past it, to show the
  // pageable fallback) and builds the device cache; a later call gives a fresh cache and
  // scheduler over the same banks. Sequences made before a call must be gone.
  Status tier_gpu(const TieringSetup& setup, uint64_t pin_budget, uint64_t pin_limit, uint32_t stream_threshold);
  // Its scheduler and per-layer timing (null before tier_gpu), and a line on its host
  // banks and streaming ("pinned: 48 layers, 17.1 GB; pageable: 0; streamed: 3.2 GB").
  const ExpertScheduler* gpu_scheduler() const;
  const std::vector<LayerTiming>* gpu_timing() const;
  std::string gpu_tiering_summary() const;

  struct Gpu;

 private:
  Engine() = default;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Gpu> gpu_;
};

}  // namespace mt::cli
