#include "apps/cli/engine.h"

#include <CLI/CLI.hpp>

#include "core/log.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/cuda_model.h"
#endif

namespace mt::cli {

#ifdef MOETIER_HAVE_CUDA
struct Engine::Gpu {
  std::unique_ptr<cuda::CudaModel> model;
};
#else
struct Engine::Gpu {};
#endif

Engine::~Engine() = default;

void add_device_flags(CLI::App& app, DeviceFlags* f) {
  app.add_option("--device", f->device, "where the model runs: cpu (default) or cuda (every layer on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--ngl,--n-gpu-layers", f->ngl, "llama.cpp style: 0 = cpu, all layers (e.g. 99) = --device cuda");
}

StatusOr<std::unique_ptr<Engine>> Engine::load(const std::string& path, int threads, bool interleave,
                                               const DeviceFlags& device) {
  bool cuda = device.device == "cuda";
  std::unique_ptr<Engine> e(new Engine());
  if (device.ngl > 0) cuda = true;
  if (device.ngl == 0 && device.device == "cuda") return invalid_argument("-ngl 0 and --device cuda contradict");
  MT_ASSIGN_OR_RETURN(e->model_, Model::load(path, {threads, interleave && !cuda}));
  if (device.ngl > 0 && static_cast<uint32_t>(device.ngl) < e->model_->hparams().n_layer) {
    return invalid_argument("-ngl " + std::to_string(device.ngl) + ": partial layer offload is not supported (" +
                            std::to_string(e->model_->hparams().n_layer) +
                            " layers; give -ngl 99 for all, or tier the experts with --expert-cache)");
  }
  if (!cuda) return e;
#ifdef MOETIER_HAVE_CUDA
  e->gpu_ = std::make_unique<Gpu>();
  MT_ASSIGN_OR_RETURN(e->gpu_->model, cuda::CudaModel::load(*e->model_));
  return e;
#else
  return unimplemented("--device cuda: this moetier was built without CUDA");
#endif
}

bool Engine::on_gpu() const { return gpu_ != nullptr; }

std::string Engine::describe() const {
#ifdef MOETIER_HAVE_CUDA
  if (gpu_) return "cuda, " + human_bytes(gpu_->model->weight_bytes()) + " of weights on the device";
#endif
  return "cpu, " + std::to_string(model_->pool().size()) + " threads";
}

StatusOr<std::unique_ptr<Evaluator>> Engine::new_sequence(uint32_t n_ctx, QuantType kv_type) const {
#ifdef MOETIER_HAVE_CUDA
  if (gpu_) return gpu_->model->new_sequence(n_ctx, kv_type);
#endif
  MT_ASSIGN_OR_RETURN(Session s, Session::create(*model_, n_ctx, kv_type));
  return std::unique_ptr<Evaluator>(new Session(std::move(s)));
}

}  // namespace mt::cli
