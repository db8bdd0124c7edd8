// CudaModel: the checks at load, the weights upload and new sequences (see cuda_model.h;
// the forward pass is CudaSequence, cuda/sequence.h).
#include "cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda/kernels/check.h"
#include "cuda/host_memory.h"
#include "cuda/sequence.h"

namespace mt::cuda {

namespace {

Status check_tensor(const Tensor& t) {
  if (!t.present()) return {};
  if (t.interleaved) return invalid_argument(t.name + " is interleaved: load the model with interleave off for CUDA");
  if (!supports(t.type)) {
    return unimplemented(t.name + ": no CUDA kernels for type " + std::string(type_name(t.type)));
  }
  return {};
}

}  // namespace

CudaModel::CudaModel(const Model& m, std::unique_ptr<Impl> impl) : model_(m), impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

uint64_t CudaModel::weight_bytes() const { return impl_->w.bytes(); }

void CudaModel::set_tiering(CudaTiering* tiering) { impl_->tiering = tiering; }

StatusOr<std::unique_ptr<CudaModel>> CudaModel::load(const Model& model, const CudaOptions& options) {
  // The device kernels implement every routing math of model/ffn.cpp route_token up to 512
  // experts (and 64 groups), GQA attention with windows and sinks, YaRN, per-layer heads,
  // the Gated DeltaNet mixer, latent attention (MLA, cuda/kernels/ops_mla.h: kv_lora_rank <= 1024,
  // n_rot <= 256).
  const HParams& hp = model.hparams();
  const ArchInfo& info = arch_info(hp.arch);
  if (hp.n_expert > 512 || (hp.n_expert_groups > 1 && hp.n_expert_groups > 64)) {
    return unimplemented(std::string(info.name) +
                         " on the CUDA backend is not implemented yet (more than 512 experts or 64 "
                         "expert groups): run it with --device cpu");
  }
  if (hp.mla && (hp.kv_lora_rank > 1024 || hp.n_rot > 256)) {
    return unimplemented(std::string(info.name) + ": latent attention with kv_lora_rank " + std::to_string(hp.kv_lora_rank) +
                         " / rope dims " + std::to_string(hp.n_rot) +
                         " has no CUDA kernel (at most 1024 / 256): run it with --device cpu");
  }
  if (hp.n_expert_used > 32) {
    return unimplemented(std::string(info.name) + ": " + std::to_string(hp.n_expert_used) +
                         " experts per token; the CUDA router takes at most 32: run it with --device cpu");
  }
  if (info.linear_attention && !gdn_supports(static_cast<int>(hp.ssm_state), static_cast<int>(hp.ssm_conv))) {
    return unimplemented(std::string(info.name) + ": Gated DeltaNet state size " + std::to_string(hp.ssm_state) + " / conv " +
                         std::to_string(hp.ssm_conv) + " has no CUDA kernel (64 or 128, conv 2..8): run it with --device cpu");
  }
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(options.device));
  const ModelWeights& w = model.weights();
  MT_RETURN_IF_ERROR(check_tensor(w.token_embd));
  MT_RETURN_IF_ERROR(check_tensor(w.output));
  for (const LayerWeights& lw : w.layers) {
    for (const Tensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.router, &lw.shexp_gate, &lw.shexp_up, &lw.shexp_down,
                            &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down, &lw.ssm_qkv, &lw.ssm_z, &lw.ssm_ba, &lw.ssm_beta,
                            &lw.ssm_alpha, &lw.ssm_out, &lw.wq_a, &lw.wq_b, &lw.wkv_a, &lw.wk_b, &lw.wv_b}) {
      MT_RETURN_IF_ERROR(check_tensor(*t));
    }
    for (const Tensor* t : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      if (!t->present()) continue;
      // Tiered experts are copied from the file's bytes (the host copy may be interleaved).
      if (!supports(t->type)) return unimplemented(t->name + ": no CUDA kernels for type " + std::string(type_name(t->type)));
      if (!options.experts_on_host) MT_RETURN_IF_ERROR(check_tensor(*t));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  impl->hp = model.hparams();
  impl->arch = &arch_info(model.hparams().arch);
  impl->experts_on_host = options.experts_on_host;
  MT_CUDA_CHECK(cudaSetDevice(options.device));
  const uint64_t need = DeviceWeights::bytes_needed(model, options.experts_on_host);
  if (need > mem.free) {
    return out_of_range("the weights need " + std::to_string(need) + " bytes of device memory, " + mem.name + " has " +
                        std::to_string(mem.free) + " free");
  }
  impl->w.upload(model, options.experts_on_host);
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  impl->attn_quant_counters = DeviceBuffer(sizeof(uint32_t) * kAttnDecodeCounters);
  MT_CUDA_CHECK(cudaMemsetAsync(impl->attn_quant_counters.get(), 0, impl->attn_quant_counters.bytes(), impl->stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(impl->stream));
  return std::unique_ptr<CudaModel>(new CudaModel(model, std::move(impl)));
}

StatusOr<std::unique_ptr<Evaluator>> CudaModel::new_sequence(uint32_t n_ctx, QuantType kv_type) {
  if (n_ctx == 0) return invalid_argument("context size must be positive");
  if (impl_->experts_on_host && impl_->tiering == nullptr) {
    return invalid_argument("the experts of this model are in host memory: set_tiering() before new_sequence()");
  }
  if (kv_type != QuantType::F16 && kv_type != QuantType::Q8_0 && kv_type != QuantType::F32) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " is not f16, q8_0 or f32");
  }
  const uint64_t block = type_traits(kv_type).block_elems;
  if (block > 1 && impl_->hp.head_dim % block != 0) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " needs a head size that is a multiple of " +
                            std::to_string(block));
  }
  MT_CUDA_CHECK(cudaSetDevice(impl_->device));
  const HParams& hp = impl_->hp;
  const uint64_t kv_rows = hp.mla ? 1 : 2;  // MLA: one latent row per position, no V rows
  const uint64_t kv_bytes = kv_rows * hp.n_attention_layers() * *row_bytes(kv_type, hp.kv_dim()) * n_ctx +
                            4ull * (hp.n_layer - hp.n_attention_layers()) * (hp.conv_state_floats() + hp.delta_state_floats());
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(impl_->device));
  if (kv_bytes > mem.free) {
    return out_of_range("the KV cache for " + std::to_string(n_ctx) + " tokens at " + type_name(kv_type) + " needs " +
                        std::to_string(kv_bytes) + " bytes of device memory, " + std::to_string(mem.free) + " are free");
  }
  return std::unique_ptr<Evaluator>(new detail::CudaSequence(*impl_, n_ctx, kv_type));
}

namespace {

// The CUDA sequence behind an Evaluator of `impl`'s model, or null.
template <class E>
auto* sequence_of(const CudaModel::Impl* impl, E& e) {
  using Seq = std::conditional_t<std::is_const_v<E>, const detail::CudaSequence, detail::CudaSequence>;
  auto* s = dynamic_cast<Seq*>(&e);
  return s != nullptr && s->belongs_to(*impl) ? s : nullptr;
}

}  // namespace

Status CudaModel::fork_sequence(const Evaluator& from, Evaluator& to) {
  const detail::CudaSequence* f = sequence_of(impl_.get(), from);
  detail::CudaSequence* t = sequence_of(impl_.get(), to);
  if (f == nullptr || t == nullptr) return invalid_argument("fork: not a sequence of this CUDA model");
  return t->fork_from(*f);
}

Status CudaModel::eval_batch(std::span<const Feed> feeds, std::vector<float>* logits, Trace* trace) {
  std::vector<detail::SeqFeed> seqs(feeds.size());
  for (size_t i = 0; i < feeds.size(); ++i) {
    seqs[i].seq = feeds[i].seq == nullptr ? nullptr : sequence_of(impl_.get(), *feeds[i].seq);
    if (seqs[i].seq == nullptr) return invalid_argument("batch: not a sequence of this CUDA model");
    seqs[i].tokens = feeds[i].tokens;
    seqs[i].want = feeds[i].want;
  }
  return detail::CudaSequence::feed_batch(*impl_, seqs, logits, trace);  // sizes *logits
}

Status CudaModel::keep_run_rollback(Evaluator& e, uint32_t max_run) {
  detail::CudaSequence* s = sequence_of(impl_.get(), e);
  if (s == nullptr) return invalid_argument("keep_run_rollback: not a sequence of this CUDA model");
  s->keep_run_rollback(max_run);
  return {};
}

Status CudaModel::truncate_sequence(Evaluator& e, uint32_t n) {
  detail::CudaSequence* s = sequence_of(impl_.get(), e);
  if (s == nullptr) return invalid_argument("truncate: not a sequence of this CUDA model");
  return s->truncate(n);
}

}  // namespace mt::cuda
