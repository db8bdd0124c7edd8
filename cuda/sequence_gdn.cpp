// CudaSequence: the Gated DeltaNet mixer (qwen3next / qwen35moe; see sequence.h).
#include "cuda/sequence.h"

#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

// The Gated DeltaNet mixer of layer l (model/gated_delta_net.cpp) on hx's T rows into y
// (T, n_embd): the input projections (one product when stacked: rows qkv | z | b | a),
// then per sequence of the pass the conv over its window, the gates, the delta rule on its
// state, the z-gated norm; ssm_out over every row. Scratch from the workspace
// (workspace_bytes' gdn_floats).
void CudaSequence::gdn_layer(const Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, float* y) {
  const HParams& hp = m_.hp;
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
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
  for (const SeqRows& r : p.st->seqs) {  // each sequence over its own conv window and state
    DeviceKvCache& kv = r.seq->kv_;
    const size_t f = r.first;
    const int n = static_cast<int>(r.n);
    float* ur = u + f * C;
    float* betar = beta + f * nv;
    float* gr = g + f * nv;
    float* orow = o + f * V;
    const float* zr = pz + f * stride_z;
    gdn_conv({pq + f * stride_q, stride_q, L.ssm_conv1d, kv.conv(l), ur, n, C, static_cast<int>(hp.ssm_conv)}, s);
    GdnGateArgs ga;
    ga.b = pb + f * stride_ba, ga.a = pa ? pa + f * stride_ba : nullptr, ga.stride = stride_ba, ga.ssm_a = L.ssm_a;
    ga.dt_bias = L.ssm_dt, ga.grouped = grouped;
    GdnNormArgs na;
    na.z = zr, na.z_stride = stride_z, na.w = L.ssm_norm, na.eps = hp.rms_eps;
    DeltaRuleArgs da;
    da.u = ur, da.conv_dim = C, da.key_dim = static_cast<int>(hp.ssm_key_dim());
    da.nk = nk, da.nv = nv, da.dk = dk, da.tiled = hp.ssm_tiled;
    da.g = gr, da.beta = betar, da.state = kv.delta(l), da.out = orow, da.T = n, da.eps = hp.rms_eps;
    if (delta_rule_gated_fits(n)) {  // decode: gates, delta rule and gated norm in one launch
      delta_rule_gated(da, ga, na, s);
    } else {
      gdn_gates(ga, n, nv, nk, betar, gr, s);
      delta_rule(da, s);
      gated_rms_norm(orow, {zr, stride_z, L.ssm_norm, hp.rms_eps}, n, nv, dk, s);
    }
  }
  mm(L.ssm_out, o, Ti, y);
  ws_->rewind(mark);
}

}  // namespace mt::cuda::detail
