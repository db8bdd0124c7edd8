// DeviceWeights: placement of the model's tensors in one device buffer (see the header).
// Two passes over the same code: a dry one sizes the buffer, the real one copies.
#include "cuda/device_weights.h"

#include <cuda_runtime.h>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/env_switch.h"
#include "model/layers.h"

namespace mt::cuda {
namespace {

constexpr uint64_t kAlign = 256;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

DeviceMatrix view_of(const Tensor& t, const uint8_t* data, uint64_t matrix_stride) {
  DeviceMatrix m;
  m.type = t.type;
  m.n_in = static_cast<int64_t>(t.ne[0]);
  m.n_out = static_cast<int64_t>(t.ne[1]);
  m.n_mat = static_cast<int64_t>(t.ne[2]);
  m.row_bytes = t.row_bytes;
  m.matrix_bytes = matrix_stride;
  m.data = data;
  return m;
}

// Rows of one matrix back to back (no padding between rows or matrices).
bool dense_rows(const Tensor& t) { return t.matrix_bytes == t.row_bytes * t.ne[1]; }

// The parts can be one matrix's rows: present, one type, one row width, dense rows.
bool stackable(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  bool ok = true;
  for (const Tensor* t : parts) {
    ok = ok && t->present() && t->type == first.type && t->ne[0] == first.ne[0] && t->ne[2] == 1 &&
         t->row_bytes == first.row_bytes && dense_rows(*t);
  }
  return ok;
}

// MOETIER_CUDA_STACK_QK (default on; =0 off): where wv's type differs from wq's and wk's
// (Q4_K_M files give V Q6_K in half the layers), wq | wk still stacked (wqk): two products
// for the layer's Q / K / V instead of three.
EnvSwitch g_stack_qk("MOETIER_CUDA_STACK_QK", true);

void copy_to(uint8_t* dst, const void* src, uint64_t bytes) {
  if (dst != nullptr && bytes > 0) MT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

}  // namespace

void set_stack_qk(bool on) { g_stack_qk.set(on); }

uint64_t DeviceWeights::bytes_needed(const Model& model, bool experts_on_host) {
  DeviceWeights w;
  w.experts_on_host_ = experts_on_host;
  w.place_all(model, /*dry=*/true);
  return w.used_;
}

void DeviceWeights::upload(const Model& model, bool experts_on_host) {
  experts_on_host_ = experts_on_host;
  place_all(model, /*dry=*/true);
  buffer_ = DeviceBuffer(used_);
  place_all(model, /*dry=*/false);
}

uint8_t* DeviceWeights::reserve(uint64_t bytes, bool dry) {
  const uint64_t at = used_;
  used_ = align_up(used_ + bytes);
  return dry || bytes == 0 ? nullptr : buffer_.as<uint8_t>() + at;
}

DeviceMatrix DeviceWeights::matrix(const Tensor& t, bool dry) {
  if (!t.present()) return {};
  uint8_t* dst = reserve(t.matrix_bytes * t.ne[2], dry);
  copy_to(dst, t.data, t.matrix_bytes * t.ne[2]);
  return view_of(t, dst, t.matrix_bytes);
}

const float* DeviceWeights::vec(const std::vector<float>& v, bool dry) {
  if (v.empty()) return nullptr;
  uint8_t* dst = reserve(v.size() * sizeof(float), dry);
  copy_to(dst, v.data(), v.size() * sizeof(float));
  return reinterpret_cast<const float*>(dst);
}

const float* DeviceWeights::floats(const Tensor& t, bool dry) {
  if (!t.present()) return nullptr;
  MT_CHECK(t.type == QuantType::F32 && dense_rows(t));
  uint8_t* dst = reserve(t.matrix_bytes * t.ne[2], dry);
  copy_to(dst, t.data, t.matrix_bytes * t.ne[2]);
  return reinterpret_cast<const float*>(dst);
}

DeviceMatrix DeviceWeights::stacked(std::initializer_list<const Tensor*> parts,
                                    std::initializer_list<DeviceMatrix*> out, bool dry) {
  MT_CHECK(parts.size() == out.size() && parts.size() > 0);
  const Tensor& first = **parts.begin();
  const bool ok = stackable(parts);
  uint64_t bytes = 0, rows = 0;
  for (const Tensor* t : parts) {
    bytes += t->matrix_bytes;
    rows += t->ne[1];
  }
  if (!ok) {
    auto o = out.begin();
    for (const Tensor* t : parts) **o++ = matrix(*t, dry);
    return {};
  }
  uint8_t* base = reserve(bytes, dry);
  uint64_t at = 0;
  auto o = out.begin();
  for (const Tensor* t : parts) {
    if (base != nullptr) copy_to(base + at, t->data, t->matrix_bytes);
    **o++ = view_of(*t, base == nullptr ? nullptr : base + at, t->matrix_bytes);
    at += t->matrix_bytes;
  }
  DeviceMatrix all = view_of(first, base, bytes);
  all.n_out = static_cast<int64_t>(rows);
  return all;
}

DeviceMatrix DeviceWeights::paired_experts(const Tensor& gate, const Tensor& up, DeviceMatrix* gate_out,
                                           DeviceMatrix* up_out, bool dry) {
  const bool ok = gate.present() && up.present() && gate.type == up.type && gate.ne == up.ne &&
                  gate.row_bytes == up.row_bytes && gate.matrix_bytes == up.matrix_bytes && dense_rows(gate);
  if (!ok) {
    *gate_out = matrix(gate, dry);
    *up_out = matrix(up, dry);
    return {};
  }
  const uint64_t mb = gate.matrix_bytes, n_mat = gate.ne[2];
  uint8_t* base = reserve(2 * mb * n_mat, dry);
  if (base != nullptr) {
    // Expert e: gate rows at base + 2e mb, up rows right after (strided 2D copies).
    MT_CUDA_CHECK(cudaMemcpy2D(base, 2 * mb, gate.data, mb, mb, n_mat, cudaMemcpyHostToDevice));
    MT_CUDA_CHECK(cudaMemcpy2D(base + mb, 2 * mb, up.data, mb, mb, n_mat, cudaMemcpyHostToDevice));
  }
  *gate_out = view_of(gate, base, 2 * mb);
  *up_out = view_of(up, base == nullptr ? nullptr : base + mb, 2 * mb);
  DeviceMatrix pair = view_of(gate, base, 2 * mb);
  pair.n_out = 2 * static_cast<int64_t>(gate.ne[1]);
  return pair;
}

void DeviceWeights::place_all(const Model& model, bool dry) {
  used_ = 0;
  const ModelWeights& w = model.weights();
  token_embd = matrix(w.token_embd, dry);
  output = w.output.present() ? matrix(w.output, dry) : token_embd;  // tied: the embedding itself
  output_norm = vec(model.output_norm(), dry);
  layers.assign(w.layers.size(), {});
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const LayerVectors& lv = model.vectors()[l];
    DevLayer& d = layers[l];
    if (!stackable({&lw.wq, &lw.wk, &lw.wv}) && stackable({&lw.wq, &lw.wk}) && g_stack_qk.on()) {
      d.wqk = stacked({&lw.wq, &lw.wk}, {&d.wq, &d.wk}, dry);
      d.wv = matrix(lw.wv, dry);
    } else {
      d.wqkv = stacked({&lw.wq, &lw.wk, &lw.wv}, {&d.wq, &d.wk, &d.wv}, dry);
    }
    d.wo = matrix(lw.wo, dry);
    d.router = matrix(lw.router, dry);
    if (experts_on_host_) {  // shapes only: the tiering's slots hold the bytes
      if (lw.gate_exps.present()) d.gate_exps = view_of(lw.gate_exps, nullptr, lw.gate_exps.matrix_bytes);
      d.up_exps = view_of(lw.up_exps, nullptr, lw.up_exps.matrix_bytes);
      d.down_exps = view_of(lw.down_exps, nullptr, lw.down_exps.matrix_bytes);
    } else if (lw.gate_exps.present()) {
      d.gate_up_exps = paired_experts(lw.gate_exps, lw.up_exps, &d.gate_exps, &d.up_exps, dry);
    } else {
      d.up_exps = matrix(lw.up_exps, dry);
    }
    if (!experts_on_host_) d.down_exps = matrix(lw.down_exps, dry);
    if (lw.shexp_gate.present()) {
      d.shexp_gate_up = stacked({&lw.shexp_gate, &lw.shexp_up}, {&d.shexp_gate, &d.shexp_up}, dry);
    } else {
      d.shexp_up = matrix(lw.shexp_up, dry);
    }
    d.shexp_down = matrix(lw.shexp_down, dry);
    if (lw.ffn_gate.present()) {
      d.ffn_gate_up = stacked({&lw.ffn_gate, &lw.ffn_up}, {&d.ffn_gate, &d.ffn_up}, dry);
    } else {
      d.ffn_up = matrix(lw.ffn_up, dry);
    }
    d.ffn_down = matrix(lw.ffn_down, dry);
    d.attn_norm = vec(lv.attn_norm, dry), d.ffn_norm = vec(lv.ffn_norm, dry);
    d.q_norm = vec(lv.q_norm, dry), d.k_norm = vec(lv.k_norm, dry);
    d.bq = vec(lv.bq, dry), d.bk = vec(lv.bk, dry), d.bv = vec(lv.bv, dry);
    d.shexp_gate_inp = vec(lv.shexp_gate_inp, dry);
    d.exp_probs_b = vec(lv.exp_probs_b, dry);
    d.moe = lw.is_moe();
    d.q_gated = lw.q_gated;
    d.bo = vec(lv.bo, dry), d.sinks = vec(lv.sinks, dry), d.router_b = vec(lv.router_b, dry);
    d.gate_exps_b = floats(lw.gate_exps_b, dry), d.up_exps_b = floats(lw.up_exps_b, dry);
    d.down_exps_b = floats(lw.down_exps_b, dry);
    d.swiglu_oai = lw.swiglu_oai;
    d.attn_gate = matrix(lw.attn_gate, dry);
    if (lw.wkv_a.present()) {
      d.mla = true;
      d.wq_a = matrix(lw.wq_a, dry), d.wq_b = matrix(lw.wq_b, dry);
      d.wkv_a = matrix(lw.wkv_a, dry), d.wk_b = matrix(lw.wk_b, dry), d.wv_b = matrix(lw.wv_b, dry);
      d.q_a_norm = vec(lv.q_a_norm, dry), d.kv_a_norm = vec(lv.kv_a_norm, dry);
    }
    if (lw.ssm_qkv.present()) {
      d.recurrent = true;
      if (lw.ssm_ba.present()) {
        d.gdn_in = stacked({&lw.ssm_qkv, &lw.ssm_z, &lw.ssm_ba}, {&d.ssm_qkv, &d.ssm_z, &d.ssm_ba}, dry);
      } else {
        d.gdn_in = stacked({&lw.ssm_qkv, &lw.ssm_z, &lw.ssm_beta, &lw.ssm_alpha}, {&d.ssm_qkv, &d.ssm_z, &d.ssm_beta, &d.ssm_alpha},
                           dry);
      }
      d.ssm_out = matrix(lw.ssm_out, dry);
      d.ssm_conv1d = vec(lv.ssm_conv1d, dry), d.ssm_dt = vec(lv.ssm_dt, dry);
      d.ssm_a = vec(lv.ssm_a, dry), d.ssm_norm = vec(lv.ssm_norm, dry);
    }
  }
}

std::vector<const DeviceMatrix*> DeviceWeights::matrices() const {
  std::vector<const DeviceMatrix*> all{&token_embd, &output};
  for (const DevLayer& d : layers) {
    for (const DeviceMatrix* m : {&d.wq, &d.wk, &d.wv, &d.wo, &d.wqkv, &d.wqk, &d.router, &d.gate_exps, &d.up_exps,
                                  &d.down_exps, &d.gate_up_exps, &d.shexp_gate, &d.shexp_up, &d.shexp_down,
                                  &d.shexp_gate_up, &d.ffn_gate, &d.ffn_up, &d.ffn_down, &d.ffn_gate_up, &d.gdn_in,
                                  &d.ssm_qkv, &d.ssm_z, &d.ssm_beta, &d.ssm_alpha, &d.ssm_ba, &d.ssm_out,
                                  &d.attn_gate, &d.wq_a, &d.wq_b, &d.wkv_a, &d.wk_b, &d.wv_b}) {
      all.push_back(m);
    }
  }
  return all;
}

}  // namespace mt::cuda
