// Engine: the loaded model and where it runs (`--device cpu|cuda`, llama.cpp's `-ngl`),
// handing out one Evaluator per sequence. On CUDA every layer is resident on the GPU
// (partial layer offload is not how moetier splits a model: experts are tiered instead).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
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
  // interleave applies to the CPU only (the GPU reads the file's layout).
  static StatusOr<std::unique_ptr<Engine>> load(const std::string& path, int threads, bool interleave,
                                                const DeviceFlags& device);
  ~Engine();

  const Model& model() const { return *model_; }
  bool on_gpu() const;
  // "cpu, 16 threads" or "cuda: NVIDIA H200, 17.20 GB of weights".
  std::string describe() const;
  StatusOr<std::unique_ptr<Evaluator>> new_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16) const;

  struct Gpu;

 private:
  Engine() = default;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Gpu> gpu_;
};

}  // namespace mt::cli
