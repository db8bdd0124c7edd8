// The step workspace and its size (cuda/step_workspace.h).
#include "cuda/step_workspace.h"

#include <algorithm>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/ops.h"
#include "model/arch.h"

namespace mt::cuda {

size_t step_workspace_bytes(const WorkspaceShape& s, uint32_t T) {
  const HParams& hp = *s.hp;
  const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), K = std::max(1u, hp.n_expert_used);
  const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
  const size_t floats = 4 * T * E + 2 * T * Q + 2 * T * KV + T * (Q + 2 * KV) + T * std::max(1u, hp.n_expert) +
                        2 * T * K + 3 * T * K * n_ff + T * K * E + 3 * T * n_ff +
                        static_cast<size_t>(std::min(T, kLogitRows)) * hp.n_vocab +  // the logits piece
                        T * E + T * K * n_ff +  // h's and u's quants and scales
                        T * Q / 2 + 2 +         // the attention output's (T*Q bytes + T*Q/4)
                        T * hp.n_layer * 8 +    // a pass of several sequences' SeqKvRow table (n_layer, T)
                        2 * (kGroupHeader + T * K * kGroupStride) + 128;  // two sets' expert groups (int32)
  const size_t C = hp.ssm_conv_dim(), Vd = hp.ssm_value_dim(), nv = hp.ssm_nv;
  const size_t gdn_floats = hp.recurrent.empty() ? 0 : T * (2 * C + 2 * Vd + 6 * nv + 3 * Q);  // see gdn_layer
  const size_t gate_floats = hp.arch == Arch::kLaguna ? T * Q : 0;  // attention_layer's output gate
  const size_t bytes = (floats + gdn_floats + gate_floats) * sizeof(float) + 64 * 256;
  size_t scratch = attention_workspace_bytes(static_cast<int>(T), static_cast<int>(hp.n_head),
                                             static_cast<int>(hp.head_dim), s.n_ctx);
  for (const DeviceMatrix* w : s.w->matrices()) {
    if (w->data != nullptr || (s.experts_on_host && w->n_in > 0)) {  // tiered experts: their shapes
      scratch = std::max(scratch, matmul_workspace_bytes(*w, static_cast<int>(T), static_cast<int>(K)));
      if (w->data == nullptr && w->n_mat > 1) {  // as a gate | up pair
        DeviceMatrix pair = *w;
        pair.n_out *= 2;
        scratch = std::max(scratch, matmul_workspace_bytes(pair, static_cast<int>(T), static_cast<int>(K)));
      }
    }
  }
  return bytes + scratch + mla_workspace_bytes(hp, *s.w, T);
}

bool StepWorkspace::ensure(const WorkspaceShape& s, uint32_t T) {
  if (T <= tokens_ && s.n_ctx <= n_ctx_) return false;
  const uint32_t tokens = std::max({T, tokens_, 8u});
  WorkspaceShape shape = s;
  shape.n_ctx = std::max(s.n_ctx, n_ctx_);
  ws_.reset();
  ws_ = std::make_unique<Workspace>(step_workspace_bytes(shape, tokens));
  tokens_ = tokens;
  n_ctx_ = shape.n_ctx;
  ++generation_;
  return true;
}

}  // namespace mt::cuda
