// CudaSequence: the Gated DeltaNet mixer (qwen3next / qwen35moe; see sequence.h).
#include "cuda/sequence.h"

#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

// The Gated DeltaNet mixer of layer l (model/gated_delta_net.cpp) on hx's T rows into y
// (T, n_embd): the input projections (one product when stacked: rows qkv | z | b | a),
// the conv over the sequence's window, the gates, the delta rule on its state, the
// z-gated norm, ssm_out. Scratch from the workspace (workspace_bytes' gdn_floats).
void CudaSequence::gdn_layer(const DevLayer& L, uint32_t l, const ActRows& hx, uint32_t T, float* y) {
  const HParams& hp = m_.hp;
  cudaStream_t s = m_.stream;
  const int Ti = static_cast<int>(T), C = static_cast<int>(hp.ssm_conv_dim()), V = static_cast<int>(hp.ssm_value_dim());
  const int nv = static_cast<int>(hp.ssm_nv), nk = static_cast<int>(hp.ssm_nk), dk = static_cast<int>(hp.ssm_state);
  const bool grouped = L.ssm_ba.n_in > 0;  // qwen3next's fused b | a per key head
  const size_t mark = ws_->mark();
  const float *pq, *pz, *pb, *pa;
  int64_t stride_q, stride_z, stride_ba;
  if (L.gdn_in.data != nullptr) {
    const int64_t width = L.gdn_in.n_out;  // C + V + 2 nv
    float* in = ws_->take_n<float>(static_cast<size_t>(T) * width);  // (T, width)
    mm(L.gdn_in, hx, in);
    pq = in, pz = in + C, pb = in + C + V, pa = grouped ? nullptr : in + C + V + nv;
    stride_q = stride_z = stride_ba = width;
  } else {
    float* q = ws_->take_n<float>(static_cast<size_t>(T) * C);       // (T, C)
    float* z = ws_->take_n<float>(static_cast<size_t>(T) * V);       // (T, V)
    float* b = ws_->take_n<float>(static_cast<size_t>(T) * 2 * nv);  // (T, nv) b then (T, nv) a, or (T, 2 nv) ba
    mm(L.ssm_qkv, hx, q);
    mm(L.ssm_z, hx, z);
    if (grouped) {
      mm(L.ssm_ba, hx, b);
      stride_ba = 2 * nv;
      pa = nullptr;
    } else {
      mm(L.ssm_beta, hx, b);
      mm(L.ssm_alpha, hx, b + static_cast<size_t>(T) * nv);
      stride_ba = nv;
      pa = b + static_cast<size_t>(T) * nv;
    }
    pq = q, pz = z, pb = b;
    stride_q = C, stride_z = V;
  }
  float* u = ws_->take_n<float>(static_cast<size_t>(T) * C);      // (T, C) conv + SiLU
  float* beta = ws_->take_n<float>(static_cast<size_t>(T) * nv);  // (T, nv)
  float* g = ws_->take_n<float>(static_cast<size_t>(T) * nv);     // (T, nv) log decay
  float* o = ws_->take_n<float>(static_cast<size_t>(T) * V);      // (T, V) delta-rule output, normed in place
  gdn_conv({pq, stride_q, L.ssm_conv1d, kv_.conv(l), u, Ti, C, static_cast<int>(hp.ssm_conv)}, s);
  GdnGateArgs ga;
  ga.b = pb, ga.a = pa, ga.stride = stride_ba, ga.ssm_a = L.ssm_a, ga.dt_bias = L.ssm_dt, ga.grouped = grouped;
  GdnNormArgs na;
  na.z = pz, na.z_stride = stride_z, na.w = L.ssm_norm, na.eps = hp.rms_eps;
  DeltaRuleArgs da;
  da.u = u, da.conv_dim = C, da.key_dim = static_cast<int>(hp.ssm_key_dim());
  da.nk = nk, da.nv = nv, da.dk = dk, da.tiled = hp.ssm_tiled;
  da.g = g, da.beta = beta, da.state = kv_.delta(l), da.out = o, da.T = Ti, da.eps = hp.rms_eps;
  if (delta_rule_gated_fits(Ti)) {  // decode: gates, delta rule and gated norm in one launch
    delta_rule_gated(da, ga, na, s);
  } else {
    gdn_gates(ga, Ti, nv, nk, beta, g, s);
    delta_rule(da, s);
    gated_rms_norm(o, {pz, stride_z, L.ssm_norm, hp.rms_eps}, Ti, nv, dk, s);
  }
  mm(L.ssm_out, o, Ti, y);
  ws_->rewind(mark);
}

}  // namespace mt::cuda::detail
