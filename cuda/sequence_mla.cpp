// CudaSequence: a multi-head latent attention layer (model/attention_mla.cpp's twin; see
// sequence.h and cuda/kernels/ops_mla.h), the absorbed form at every batch size:
//   q      (T, H, mla_k)  = wq_b . rms(wq_a . h) or wq . h       per head [nope | pe]
//   c      (T, R + P)     = wkv_a . h                             [latent | k_pe]
//   mla_prep: cache row <- [rms(latent) | rope(k_pe)]; q_nope (T*H, nope); q_pe (T*H, P) roped
//   q_lat  (T*H, R)       = wk_b[h] . q_nope                      one grouped product, slot t*H+h -> matrix h
//   o      (T*H, R)       = MQA of [q_lat | q_pe] over the latent rows, value = the latent part
//   v      (T, H * mla_v) = wv_b[h] . o                           the same grouped product
//   y      (T, n_embd)    = wo . v
// The per-head products run as routed expert products whose "expert" of slot t * H + h is
// head h (the KV cache's head id table, cuda/device_kv_cache.h). The workspace its
// buffers take: mla_workspace_bytes (cuda/step_workspace.h).
#include <algorithm>

#include "core/check.h"
#include "cuda/kernel_params.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops_mla.h"
#include "cuda/sequence.h"

namespace mt::cuda {

size_t mla_workspace_bytes(const HParams& hp, const DeviceWeights& w, uint32_t T) {
  if (!hp.mla) return 0;
  const size_t H = hp.n_head, R = hp.kv_lora_rank, P = hp.n_rot, nope = hp.mla_k - hp.n_rot;
  // q, c, q_nope, q_pe, q_lat, o, v, qa (mla_layer's takes) and their alignment.
  const size_t floats = T * (H * hp.mla_k + (R + P) + H * nope + H * P + 2 * H * R + H * hp.mla_v + hp.q_lora_rank);
  size_t scratch = mla_attention_workspace_bytes(static_cast<int>(T), static_cast<int>(H), static_cast<int>(R));
  for (const DevLayer& L : w.layers) {
    if (!L.mla) continue;
    for (const DeviceMatrix* m : {&L.wk_b, &L.wv_b}) {  // routed over K = n_head slots per token
      scratch = std::max(scratch, matmul_workspace_bytes(*m, static_cast<int>(T), static_cast<int>(H)));
    }
  }
  return floats * sizeof(float) + 8 * 256 + scratch;
}

}  // namespace mt::cuda

namespace mt::cuda::detail {

void CudaSequence::mla_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx) {
  const HParams& hp = m_.hp;
  cudaStream_t s = m_.stream;
  const size_t T = p.T;
  const int Ti = p.Ti, H = static_cast<int>(hp.n_head), R = static_cast<int>(hp.kv_lora_rank);
  const int P = static_cast<int>(hp.n_rot), QK = static_cast<int>(hp.mla_k), nope = QK - P;
  const int Vd = static_cast<int>(hp.mla_v), QL = static_cast<int>(hp.q_lora_rank);
  MT_CHECK(L.wkv_a.data != nullptr && L.wk_b.n_mat == H && L.wv_b.n_mat == H && nope > 0);
  MT_CHECK(kv_.head_id_rows() >= p.T);  // built with the sequence
  const int32_t* ids = kv_.head_ids();
  const size_t mark = ws_->mark();
  float* q = ws_->take_n<float>(T * H * QK);         // (T, H, mla_k) per head [nope | pe]
  float* c = ws_->take_n<float>(T * (R + P));        // (T, R + P) [latent | k_pe]
  float* q_nope = ws_->take_n<float>(T * H * nope);  // (T*H, nope)
  float* q_pe = ws_->take_n<float>(T * H * P);       // (T*H, P) roped
  float* q_lat = ws_->take_n<float>(T * H * R);      // (T*H, R) absorbed into latent space
  float* o = ws_->take_n<float>(T * H * R);          // (T*H, R) attention output (latent)
  float* v = ws_->take_n<float>(T * H * Vd);         // (T, H * mla_v) wo's input

  stage(p, "mla q");
  if (L.wq_a.data != nullptr) {
    float* qa = ws_->take_n<float>(T * QL);  // (T, q_lora_rank)
    mm(L.wq_a, hx, qa);
    rms_norm({qa, QL, L.q_a_norm, hp.rms_eps, Ti, QL, qa, QL}, s);
    mm(L.wq_b, qa, Ti, q);
  } else {
    mm(L.wq, hx, q);
  }
  mm(L.wkv_a, hx, c);

  // Each sequence's rows into its own cache.
  for (const SeqRows& r : p.st->seqs) {
    DeviceKvCache& kv = r.seq->kv_;
    const size_t f = r.first;
    stage(p, "mla prep");
    MlaPrepArgs pa;
    pa.c = c + f * (R + P), pa.c_stride = R + P, pa.kv_norm = L.kv_a_norm, pa.eps = hp.rms_eps;
    pa.q = q + f * H * QK, pa.q_stride = static_cast<int64_t>(H) * QK;
    pa.n_tokens = static_cast<int>(r.n), pa.n_head = H, pa.R = R, pa.P = P, pa.nope = nope;
    pa.rope = mla_rope(hp, P);
    pa.pos0 = r.pos, pa.pos_dev = p.pos_dev;
    pa.q_nope = q_nope + f * H * nope, pa.q_pe = q_pe + f * H * P;
    pa.cache = kv.k(l), pa.kv_type = kv.type(), pa.row_bytes = kv.row_bytes();
    mla_prep(pa, s);
  }

  stage(p, "mla absorb");
  ActRows nope_rows;
  nope_rows.x = q_nope;
  nope_rows.rows = Ti * H;
  mm_experts(L.wk_b, ids, H, nope_rows, q_lat, /*per_slot=*/true);

  for (const SeqRows& r : p.st->seqs) {  // each sequence over its own cache
    DeviceKvCache& kv = r.seq->kv_;
    const size_t f = r.first;
    stage(p, "attention");
    MlaAttentionArgs aa;
    aa.q_lat = q_lat + f * H * R, aa.q_pe = q_pe + f * H * P;
    aa.cache = kv.k(l), aa.kv_type = kv.type(), aa.row_bytes = kv.row_bytes();
    aa.n_tokens = static_cast<int>(r.n), aa.n_head = H, aa.R = R, aa.P = P;
    aa.scale = mla_kq_scale(hp);
    aa.pos0 = r.pos, aa.pos_dev = p.pos_dev, aa.n_kv_cap = p.st->graph_n_kv_cap;
    aa.out = o + f * H * R;
    const size_t at = ws_->mark();
    mla_attention(aa, *ws_, s);
    ws_->rewind(at);
  }

  stage(p, "mla v");
  ActRows o_rows;
  o_rows.x = o;
  o_rows.rows = Ti * H;
  mm_experts(L.wv_b, ids, H, o_rows, v, /*per_slot=*/true);
  stage(p, "wo");
  mm(L.wo, v, Ti, p.y);
  ws_->rewind(mark);  // the stream orders later takes after these launches
}

}  // namespace mt::cuda::detail
