#include "apps/cli/model_sizes.h"

#include <string_view>

#include "model/hparams.h"

namespace mt::cli {

StatusOr<ModelSizes> read_model_sizes(const gguf::GgufFile& f) {
  MT_ASSIGN_OR_RETURN(HParams h, read_hparams(f));
  ModelSizes m;
  m.file_bytes = f.file_size();
  const bool tied = f.find_tensor("output.weight") == nullptr;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string_view name = t.name;
    if (name.find("_exps") != std::string_view::npos) continue;  // routed experts: the geometry
    if (name.find("_shexp") != std::string_view::npos) {
      m.shared_expert_bytes += t.nbytes;
    } else if (name == "token_embd.weight") {
      m.token_embd_bytes = t.nbytes;
      m.token_embd_row_bytes = t.row_bytes();
      if (tied) m.dense_bytes += t.nbytes;  // it is the output head too
    } else {
      m.dense_bytes += t.nbytes;
    }
  }
  // K and V rows per layer; a latent (MLA) cache keeps one row, read as both.
  // Recurrent layers keep a fixed-size F32 state per sequence instead.
  const uint64_t kv_elements = static_cast<uint64_t>(h.n_attention_layers()) * (h.mla ? 1 : 2) * h.kv_dim();
  m.state_bytes_per_seq = 4ull * (h.n_layer - h.n_attention_layers()) * (h.conv_state_floats() + h.delta_state_floats());
  m.kv_bytes_per_token_f16 = kv_elements * 2;
  m.kv_bytes_per_token_q8_0 = (kv_elements * 34 + 31) / 32;
  m.n_expert_used = h.n_expert_used;
  m.context_length = h.n_ctx_train;
  return m;
}

}  // namespace mt::cli
