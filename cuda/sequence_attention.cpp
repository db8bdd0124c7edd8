// CudaSequence: a grouped-query attention layer (model/attention.cpp's twin; see
// sequence.h): Q/K/V (one product when stacked, two when only Q | K are), bias + q/k norm + RoPE + cache store in
// one launch (YaRN angles where the model has them), attention over the sequence's cache
// (a sliding window and sink logits where the layer has them), the output gate where the
// architecture has one (gated attention's sigmoid, laguna's softplus), the output
// projection (+ its bias) into y. Per-layer head counts, RoPE dims and bases come from
// HParams::for_layer.
#include "cuda/sequence.h"

#include "core/check.h"
#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

// The layer's Q / K / V rows (one product when stacked, two when only Q | K are, else
// three) into p.qkv; pa's sources and strides point at them (gated attention: the queries
// split from their gates into p.qsplit, the gates into p.qgate).
void CudaSequence::qkv_products(Pass& p, const DevLayer& L, const HParams& hp, const ActRows& hx, AttnPrepArgs& pa) {
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
  const int Ti = p.Ti;
  const int Q = static_cast<int>(hp.q_dim()), KVd = static_cast<int>(hp.kv_dim()), hd = static_cast<int>(hp.head_dim);
  const int Ql = L.q_gated ? 2 * Q : Q;  // attn_q rows of this layer
  if (L.wqkv.data != nullptr) {
    mm(L.wqkv, hx, p.qkv);
    pa.q_src = p.qkv, pa.k_src = p.qkv + Ql, pa.v_src = p.qkv + Ql + KVd;
    pa.q_stride = pa.k_stride = pa.v_stride = Ql + 2 * KVd;
  } else if (L.wqk.data != nullptr) {  // wq | wk in one product (T, Ql + kv_dim), wv apart (T, kv_dim)
    float* qk = p.qkv;
    float* vr = p.qkv + static_cast<size_t>(T) * (Ql + KVd);
    mm(L.wqk, hx, qk);
    mm(L.wv, hx, vr);
    pa.q_src = qk, pa.k_src = qk + Ql, pa.v_src = vr;
    pa.q_stride = pa.k_stride = Ql + KVd;
    pa.v_stride = KVd;
  } else {
    float* qr = p.qkv;                                 // (T, attn_q rows)
    float* kr = p.qkv + static_cast<size_t>(T) * Ql;   // (T, kv_dim)
    float* vr = kr + static_cast<size_t>(T) * KVd;     // (T, kv_dim)
    mm(L.wq, hx, qr);
    mm(L.wk, hx, kr);
    mm(L.wv, hx, vr);
    pa.q_src = qr, pa.k_src = kr, pa.v_src = vr;
    pa.q_stride = Ql, pa.k_stride = pa.v_stride = KVd;
  }
  if (L.q_gated) {  // per head [query | gate]: queries to qsplit, gates kept for the output
    split_gated_q(pa.q_src, pa.q_stride, Ti, static_cast<int>(hp.n_head), hd, p.qsplit, p.qgate, s);
    pa.q_src = p.qsplit;
    pa.q_stride = Q;
  }
}

void CudaSequence::attention_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx) {
  const HParams hp = m_.hp.for_layer(l);  // this layer's heads, RoPE dims and base (SWA layers)
  const ArchInfo& arch = *m_.arch;
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
  const int Ti = p.Ti;
  const int Q = static_cast<int>(hp.q_dim()), KVd = static_cast<int>(hp.kv_dim()), hd = static_cast<int>(hp.head_dim);
  const size_t gate_mark = ws_->mark();
  float* gate = nullptr;  // laguna: (T, G) the output gate's logits
  const int G = static_cast<int>(L.attn_gate.n_out);
  if (G > 0) {
    gate = ws_->take_n<float>(static_cast<size_t>(T) * G);
    mm(L.attn_gate, hx, gate);
  }
  stage(p, "qkv");
  AttnPrepArgs pa;
  qkv_products(p, L, hp, hx, pa);
  pa.bq = L.bq, pa.bk = L.bk, pa.bv = L.bv;
  if (arch.qk_norm == QkNorm::kPerHead || arch.qk_norm == QkNorm::kPerHeadOptional) {  // optional: null when absent
    pa.q_norm = L.q_norm, pa.k_norm = L.k_norm;
  } else if (arch.qk_norm == QkNorm::kFullWidth) {  // over the whole q / k row, after the bias
    MT_CHECK(L.bq == nullptr && L.bk == nullptr);
    float* qs = const_cast<float*>(pa.q_src);
    float* ks = const_cast<float*>(pa.k_src);
    rms_norm({qs, pa.q_stride, L.q_norm, hp.rms_eps, Ti, Q, qs, pa.q_stride}, s);
    rms_norm({ks, pa.k_stride, L.k_norm, hp.rms_eps, Ti, KVd, ks, pa.k_stride}, s);
  }
  pa.eps = hp.rms_eps;
  pa.n_tokens = Ti;
  pa.n_head = static_cast<int>(hp.n_head);
  pa.n_head_kv = static_cast<int>(hp.n_head_kv);
  pa.head_dim = hd;
  pa.n_rot = static_cast<int>(hp.n_rot);
  pa.freq_base = hp.rope_freq_base;
  pa.freq_scale = hp.rope_freq_scale;
  pa.attn_factor = hp.rope_attn_factor;
  if (hp.yarn_ext != 0.0f) {
    const RopeYarn yarn = rope_yarn(hp, hp.n_rot);
    pa.yarn_ext = hp.yarn_ext, pa.yarn_lo = yarn.lo, pa.yarn_hi = yarn.hi, pa.yarn_mscale = yarn.mscale;
  }
  pa.neox = arch.rope == RopeStyle::kNeox;
  pa.pos_dev = p.pos_dev;
  AttentionArgs aa;
  aa.n_head = static_cast<int>(hp.n_head);
  aa.n_head_kv = static_cast<int>(hp.n_head_kv);
  aa.head_dim = hd;
  aa.pos_dev = p.pos_dev;
  aa.n_kv_cap = p.st->graph_n_kv_cap;
  aa.window = hp.is_swa(l) ? hp.n_swa : 0u;
  aa.sinks = L.sinks;
  // The warps kernel in its lanes form where it measured faster (moetier_cuda_attention
  // --decode, H200, 2026-12-03; docs/PERFORMANCE.md): at every length up to 4096 (512:
  // 15.6 vs 21.2 us, 4096: 28.5 vs 43.8).
  aa.warp_max = opt_.warp_attention_max;
  aa.warp_lanes = true;
  // wo's activation rows quantized by the attention's CTAs (where its one-chunk warps
  // kernel runs) when nothing changes them between and wo's product reads quantized rows
  // (one launch fewer per layer; a quantize launch before wo measured 0.7-1.3% slower).
  ActRows att{p.att, Ti};
  const bool quant_wo = !L.q_gated && G == 0 && T <= static_cast<uint32_t>(kMmvqMaxTokens) &&
                        quantizes_activations(L.wo.type) && L.wo.n_in == Q;
  if (quant_wo) {
    att.mode = act_quant_for(L.wo.type);
    aa.quant_mode = att.mode;
    aa.quant_counters = m_.attn_quant_counters.as<uint32_t>();
  }
  const bool all_quantized = attend_sequences(p, l, pa, aa, quant_wo);
  if (all_quantized) att.quantized = true, att.qs = p.aq, att.meta = p.am;
  if (L.q_gated) mul_sigmoid(p.att, p.qgate, static_cast<int64_t>(T) * Q, s);
  if (G > 0) mul_softplus_gate(p.att, gate, T, Q, G, s);
  stage(p, "wo");
  mm(L.wo, att, p.y);
  if (L.bo != nullptr) add_bias(p.y, L.bo, Ti, static_cast<int>(hp.n_embd), s);
  if (gate != nullptr) ws_->rewind(gate_mark);
}

// (n_layer, T): row t's sequence's cache of each attention layer and its position + 1,
// uploaded once per pass (recurrent and latent layers' entries stay empty).
void CudaSequence::fill_kv_rows(const CudaModel::Impl& m, std::span<const SeqRows> seqs, uint32_t T, SeqKvRow* out) {
  for (uint32_t l = 0; l < m.hp.n_layer; ++l) {
    const DevLayer& L = m.w.layers[l];
    if (L.recurrent || L.mla) continue;
    for (const SeqRows& r : seqs) {
      for (uint32_t i = 0; i < r.n; ++i) {
        SeqKvRow& row = out[static_cast<size_t>(l) * T + r.first + i];
        row.k = r.seq->kv_.k(l), row.v = r.seq->kv_.v(l), row.n_kv = r.pos + i + 1;
      }
    }
  }
}

void CudaSequence::multi_kv_rows(Pass& p) {
  const size_t n = static_cast<size_t>(m_.hp.n_layer) * p.T;
  auto* dev = ws_->take_n<SeqKvRow>(n);
  if (p.st->pinned_kv_rows != nullptr) {  // a batch graph: the table the host fills before each replay
    MT_CUDA_CHECK(cudaMemcpyAsync(dev, p.st->pinned_kv_rows, n * sizeof(SeqKvRow), cudaMemcpyHostToDevice, m_.stream));
  } else {
    std::vector<SeqKvRow> rows(n);
    fill_kv_rows(m_, p.st->seqs, p.T, rows.data());
    // (rows is pageable: the copy has taken it into staging memory when it returns)
    MT_CUDA_CHECK(cudaMemcpyAsync(dev, rows.data(), n * sizeof(SeqKvRow), cudaMemcpyHostToDevice, m_.stream));
  }
  p.kv_rows_dev = dev;
}

bool CudaSequence::attend_sequences(Pass& p, uint32_t l, const AttnPrepArgs& pa, const AttentionArgs& aa,
                                    bool quant_wo) {
  cudaStream_t s = m_.stream;
  const size_t Q = static_cast<size_t>(aa.n_head) * aa.head_dim;
  const std::span<const SeqRows> seqs = p.st->seqs;
  // One launch's attention over rows [first, first + n) of sequence-or-table.
  auto attend = [&](AttentionArgs rb, uint32_t first, uint32_t n) {
    const size_t q_at = static_cast<size_t>(first) * Q;
    rb.q = p.q + q_at;
    rb.out = p.att + q_at;
    rb.n_tokens = static_cast<int>(n);
    if (quant_wo) {  // (read only where attention() says it wrote them)
      rb.quant_qs = p.aq + q_at, rb.quant_meta = p.am + q_at / 32;
    }
    stage(p, "attention");
    const size_t mark = ws_->mark();
    const bool quantized = attention(rb, *ws_, s);
    ws_->rewind(mark);
    return quantized;
  };
  bool all_quantized = quant_wo;
  if (p.kv_rows_dev == nullptr) {  // per sequence: RoPE at its positions into its cache, then attention over it
    for (const SeqRows& r : seqs) {
      DeviceKvCache& kv = r.seq->kv_;
      AttnPrepArgs ra = pa;
      ra.q_src = pa.q_src + static_cast<size_t>(r.first) * pa.q_stride;
      ra.k_src = pa.k_src + static_cast<size_t>(r.first) * pa.k_stride;
      ra.v_src = pa.v_src + static_cast<size_t>(r.first) * pa.v_stride;
      ra.n_tokens = static_cast<int>(r.n);
      ra.pos0 = r.pos;
      ra.q_out = p.q + static_cast<size_t>(r.first) * Q;
      ra.k_cache = kv.k(l), ra.v_cache = kv.v(l), ra.kv_type = kv.type(), ra.row_bytes = kv.row_bytes();
      stage(p, "attn prep");
      attn_prep(ra, s);
      AttentionArgs rb = aa;
      rb.k_cache = kv.k(l), rb.v_cache = kv.v(l), rb.kv_type = kv.type(), rb.kv_row_bytes = kv.row_bytes();
      rb.pos0 = r.pos;
      all_quantized = attend(rb, r.first, r.n) && all_quantized;
    }
    return all_quantized;
  }
  // Several sequences of one KV type: every row's RoPE and cache store in one launch ...
  const SeqKvRow* table = p.kv_rows_dev + static_cast<size_t>(l) * p.T;
  const DeviceKvCache& kv0 = seqs[0].seq->kv_;
  AttnPrepArgs ra = pa;
  ra.n_tokens = p.Ti;
  ra.q_out = p.q;
  ra.seq_rows = table;
  ra.kv_type = kv0.type(), ra.row_bytes = kv0.row_bytes();
  stage(p, "attn prep");
  attn_prep(ra, s);
  // ... then each stretch of consecutive one-token sequences (decode) in one attention
  // launch of up to kAttnDecodeMaxSeqTokens, a longer run (a prompt chunk) alone.
  AttentionArgs base = aa;
  base.k_cache = kv0.k(l), base.v_cache = kv0.v(l), base.kv_type = kv0.type(), base.kv_row_bytes = kv0.row_bytes();
  for (size_t i = 0; i < seqs.size();) {
    const SeqRows& r = seqs[i];
    if (r.n > 1) {
      AttentionArgs rb = base;
      rb.k_cache = r.seq->kv_.k(l), rb.v_cache = r.seq->kv_.v(l), rb.pos0 = r.pos;
      all_quantized = attend(rb, r.first, r.n) && all_quantized;
      ++i;
      continue;
    }
    size_t j = i;
    uint32_t max_n_kv = 0;
    while (j < seqs.size() && seqs[j].n == 1 && j - i < static_cast<size_t>(kAttnDecodeMaxSeqTokens)) {
      max_n_kv = std::max(max_n_kv, seqs[j].pos + 1);
      ++j;
    }
    AttentionArgs rb = base;
    rb.seq_rows = table + r.first;
    rb.max_n_kv = p.st->batch_n_kv_cap > 0 ? p.st->batch_n_kv_cap : max_n_kv;  // a graph: its span's end
    all_quantized = attend(rb, r.first, static_cast<uint32_t>(j - i)) && all_quantized;
    i = j;
  }
  return all_quantized;
}

}  // namespace mt::cuda::detail
