// persistent_unsupported: what the persistent decode kernel (cuda/decode_persistent.h)
// needs of a model, checked once when a sequence asks for it.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/decode_persistent.h"
#include "cuda/device_weights.h"
#include "model/arch.h"
#include "model/hparams.h"

namespace mt::cuda {
namespace {

// Why the kernel cannot read `m` (empty: it can). Quantized rows are read at their
// type's natural alignment with 16-byte activation loads; float rows 8 weights at a time
// with 16-byte loads.
std::string matrix_problem(const char* name, const DeviceMatrix& m) {
  const std::string n(name);
  if (m.data == nullptr) return n + " is not one resident matrix";
  const int mode = persistent_act_mode(m.type);
  if (mode < 0) return n + " has type " + type_name(m.type) + " (not F32/F16/BF16/Q4_0/Q8_0/Q4_K/Q5_K/Q6_K)";
  const uint64_t align = mode == 0 ? 16 : (m.type == QuantType::Q4_K || m.type == QuantType::Q5_K) ? 16 : 2;
  const uint64_t addr = reinterpret_cast<uintptr_t>(m.data);
  if (addr % align != 0 || m.row_bytes % align != 0 || (m.n_mat > 1 && m.matrix_bytes % align != 0)) {
    return n + " is not " + std::to_string(align) + "-byte aligned";
  }
  if (m.n_in % (mode == 2 ? 256 : mode == 1 ? 32 : 8) != 0) return n + "'s input width does not divide into blocks";
  if (m.n_out > INT32_MAX / 64 || m.n_in > INT32_MAX / 64) return n + " is too large";
  return {};
}

// The quantized ones among ms share one activation mode.
bool same_act_mode(std::initializer_list<const DeviceMatrix*> ms) {
  int mode = 0;
  for (const DeviceMatrix* m : ms) {
    const int mm = persistent_act_mode(m->type);
    if (mm > 0 && mode > 0 && mm != mode) return false;
    if (mm > 0) mode = mm;
  }
  return true;
}

}  // namespace

std::string persistent_unsupported(const HParams& hp, const ArchInfo& arch, const DeviceWeights& w, QuantType kv_type) {
  if (kv_type != QuantType::F16) return "the KV cache is not F16";
  if (hp.mla || !hp.recurrent.empty() || hp.n_swa != 0 || !hp.n_head_per_layer.empty()) {
    return "the attention is not plain grouped-query attention in every layer";
  }
  if (hp.n_expert == 0 || hp.n_expert > kPersistentMaxExperts || hp.n_expert_used == 0 || hp.n_expert_used > 32) {
    return "the routed FFN has no experts, more than 512, or a top-k above 32";
  }
  if (hp.gating != ExpertGating::kSoftmax || hp.expert_weights_scale != 1.0f || hp.n_expert_groups > 1 ||
      hp.renormalize != arch.renormalize_topk) {
    return "the routing is not a plain softmax top-k";
  }
  if (hp.head_dim == 0 || hp.head_dim % 32 != 0 || hp.head_dim > kPersistentMaxHeadDim || hp.n_head_kv == 0 ||
      hp.n_head > kPersistentMaxHeads ||
      hp.n_head % hp.n_head_kv != 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return "the head shape is not supported (head_dim a multiple of 32 up to 256, at most 128 heads)";
  }
  if (arch.qk_norm == QkNorm::kFullWidth) return "the q/k norm is over the full width";
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    const DevLayer& L = w.layers[l];
    const std::string at = " in layer " + std::to_string(l);
    if (!L.moe || L.recurrent || L.mla || L.q_gated || L.swiglu_oai || L.attn_gate.n_out > 0) {
      return "layer " + std::to_string(l) + " is not attention + routed experts";
    }
    if (L.bq || L.bk || L.bv || L.bo || L.sinks || L.router_b || L.exp_probs_b || L.shexp_up.data) {
      return "biases, sinks, a selection bias or a shared expert" + at;
    }
    const bool stacked = L.wqkv.data != nullptr;
    for (const auto& [name, m] :
         {std::pair<const char*, const DeviceMatrix*>{"Q|K|V", stacked ? &L.wqkv : &L.wq}, {"wk", stacked ? nullptr : &L.wk},
          {"wv", stacked ? nullptr : &L.wv}, {"wo", &L.wo}, {"the router", &L.router}, {"gate|up", &L.gate_up_exps},
          {"down", &L.down_exps}}) {
      if (m == nullptr) continue;
      if (std::string p = matrix_problem(name, *m); !p.empty()) return p + at;
    }
    // Products that read one quantized row share its mode.
    if (!stacked && !same_act_mode({&L.wq, &L.wk, &L.wv})) return "wq, wk and wv quantize differently" + at;
    if (!same_act_mode({&L.router, &L.gate_up_exps})) return "the router and gate|up quantize differently" + at;
  }
  if (std::string p = matrix_problem("the output", w.output); !p.empty()) return p;
  return {};
}

}  // namespace mt::cuda
