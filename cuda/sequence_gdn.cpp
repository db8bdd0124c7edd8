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
    // A verification run (keep_run_rollback): the states before it and its inputs kept
    const bool logged = kv.logs_run(r.n);
    DeviceKvCache::RunLog* lg = logged ? &kv.run_log(l) : nullptr;
    if (logged) {
      MT_CUDA_CHECK(cudaMemcpyAsync(lg->conv_before.get(), kv.conv(l), lg->conv_before.bytes(), cudaMemcpyDeviceToDevice, s));
      MT_CUDA_CHECK(cudaMemcpy2DAsync(lg->conv_rows.get(), sizeof(float) * C, pq + f * stride_q, sizeof(float) * stride_q,
                                      sizeof(float) * C, r.n, cudaMemcpyDeviceToDevice, s));
      MT_CUDA_CHECK(cudaMemcpyAsync(lg->delta_before.get(), kv.delta(l), lg->delta_before.bytes(), cudaMemcpyDeviceToDevice, s));
    }
    kv.set_logged_run(logged ? r.seq->pos_ : 0, logged ? r.n : 0);
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
    if (delta_rule_gated_fits(n) && !logged) {  // decode: gates, delta rule and gated norm in one launch
      delta_rule_gated(da, ga, na, s);
    } else {  // a logged run too: its rollback replays this delta_rule on the kept tokens
      gdn_gates(ga, n, nv, nk, betar, gr, s);
      if (logged) {
        const size_t rows_bytes = sizeof(float) * static_cast<size_t>(n) * C, gate_bytes = sizeof(float) * n * nv;
        MT_CUDA_CHECK(cudaMemcpyAsync(lg->u_rows.get(), ur, rows_bytes, cudaMemcpyDeviceToDevice, s));
        MT_CUDA_CHECK(cudaMemcpyAsync(lg->g.get(), gr, gate_bytes, cudaMemcpyDeviceToDevice, s));
        MT_CUDA_CHECK(cudaMemcpyAsync(lg->beta.get(), betar, gate_bytes, cudaMemcpyDeviceToDevice, s));
      }
      delta_rule(da, s);
      gated_rms_norm(orow, {zr, stride_z, L.ssm_norm, hp.rms_eps}, n, nv, dk, s);
    }
  }
  mm(L.ssm_out, o, Ti, y);
  ws_->rewind(mark);
}

void CudaSequence::rollback_run(uint32_t keep) {
  const HParams& hp = m_.hp;
  cudaStream_t s = m_.stream;
  const size_t C = hp.ssm_conv_dim();
  const int64_t Kc = hp.ssm_conv;
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.is_recurrent(l)) continue;
    DeviceKvCache::RunLog& lg = kv_.run_log(l);
    // The conv window (Kc - 1 raw rows, oldest first): the last of [before | kept rows].
    float* conv = kv_.conv(l);
    for (int64_t j = 0; j + 1 < Kc; ++j) {
      const int64_t i = static_cast<int64_t>(keep) - (Kc - 1) + j;  // kept row i; < 0: from before the run
      const float* src = i >= 0 ? lg.conv_rows.as<float>() + i * static_cast<int64_t>(C)
                                : lg.conv_before.as<float>() + (Kc - 1 + i) * static_cast<int64_t>(C);
      MT_CUDA_CHECK(cudaMemcpyAsync(conv + j * static_cast<int64_t>(C), src, sizeof(float) * C, cudaMemcpyDeviceToDevice, s));
    }
    MT_CUDA_CHECK(cudaMemcpyAsync(kv_.delta(l), lg.delta_before.get(), lg.delta_before.bytes(), cudaMemcpyDeviceToDevice, s));
    if (keep == 0) continue;
    DeltaRuleArgs da;
    da.u = lg.u_rows.as<float>(), da.conv_dim = static_cast<int>(C), da.key_dim = static_cast<int>(hp.ssm_key_dim());
    da.nk = static_cast<int>(hp.ssm_nk), da.nv = static_cast<int>(hp.ssm_nv), da.dk = static_cast<int>(hp.ssm_state);
    da.tiled = hp.ssm_tiled;
    da.g = lg.g.as<float>(), da.beta = lg.beta.as<float>(), da.state = kv_.delta(l), da.out = lg.out.as<float>();
    da.T = static_cast<int>(keep), da.eps = hp.rms_eps;
    delta_rule(da, s);
  }
}

}  // namespace mt::cuda::detail
