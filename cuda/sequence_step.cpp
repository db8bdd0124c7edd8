// CudaSequence: one micro-batch's launches, layer by layer (see sequence.h): the
// embedding, each layer's mixer (attention, sequence_attention.cpp; Gated DeltaNet,
// sequence_gdn.cpp) and FFN (routed experts, sequence_moe.cpp; dense), each residual add
// fused with the next norm, then the logits.
#include "cuda/sequence.h"

#include <algorithm>

#include "core/check.h"
#include "cuda/kernels/check.h"

namespace mt::cuda::detail {
namespace {

// The product that reads a layer's attention-norm / FFN-norm output first (its
// activation quantization is done by the norm's launch).
const DeviceMatrix& attn_reader(const DevLayer& L) {
  if (L.recurrent) return L.gdn_in.data ? L.gdn_in : L.ssm_qkv;
  if (L.mla) return L.wq_a.data ? L.wq_a : L.wq;
  return L.wqkv.data ? L.wqkv : L.wqk.data ? L.wqk : L.wq;
}
const DeviceMatrix& ffn_reader(const DevLayer& L) {
  if (L.moe) return L.gate_up_exps.data ? L.gate_up_exps : L.up_exps;
  return L.ffn_gate_up.data ? L.ffn_gate_up : L.ffn_up;
}

}  // namespace

void CudaSequence::take_step_buffers(Pass& p) {
  const HParams& hp = m_.hp;
  const size_t T = p.T;
  const size_t E = hp.n_embd, Q = hp.q_dim(), KVd = hp.kv_dim();
  const size_t X = std::max(1u, hp.n_expert), Kc = std::max(1u, hp.n_expert_used);
  const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
  const size_t Qw = m_.arch->linear_attention ? 2 * Q : Q;  // attn_q rows (qwen3next / qwen35moe: query | gate per head)
  p.x = ws_->take_n<float>(T * E);
  p.h = ws_->take_n<float>(T * E);
  p.qkv = ws_->take_n<float>(T * (Qw + 2 * KVd));
  p.qgate = Qw > Q ? ws_->take_n<float>(T * Q) : nullptr;
  p.qsplit = Qw > Q ? ws_->take_n<float>(T * Q) : nullptr;
  p.q = ws_->take_n<float>(T * Q);
  p.att = ws_->take_n<float>(T * Q);
  p.y = ws_->take_n<float>(T * E);
  p.probs = ws_->take_n<float>(T * X);
  p.sel = ws_->take_n<int32_t>(T * Kc);
  p.wts = ws_->take_n<float>(T * Kc);
  p.gu = ws_->take_n<float>(T * Kc * 2 * n_ff);
  p.u = ws_->take_n<float>(T * Kc * n_ff);
  p.d = ws_->take_n<float>(T * Kc * E);
  p.gus = ws_->take_n<float>(T * 2 * n_ff);
  p.us = ws_->take_n<float>(T * n_ff);
  p.ds = ws_->take_n<float>(T * E);
  p.hq = ws_->take_n<int8_t>(T * E);
  p.hm = ws_->take_n<uint2>(T * E / 32 + 1);
  p.uq = ws_->take_n<int8_t>(T * Kc * n_ff);
  p.um = ws_->take_n<uint2>(T * Kc * n_ff / 32 + 1);
  p.aq = ws_->take_n<int8_t>(T * Q);
  p.am = ws_->take_n<uint2>(T * Q / 32 + 1);
}

// x += y, h = rms_norm(x) * w; for a decode step also h quantized in the mode of the
// product that reads it next (one launch instead of a norm and a quantize).
// combine set: y is that MoE combine, computed in the same launch (n_embd >= 256).
ActRows CudaSequence::add_norm(Pass& p, const float* add_y, const float* w, const DeviceMatrix& reader,
                               const MoeCombineIn* combine) {
  const HParams& hp = m_.hp;
  cudaStream_t s = m_.stream;
  const int E = static_cast<int>(hp.n_embd), Ti = p.Ti;
  ActRows a;
  a.x = p.h;
  a.rows = Ti;
  const QuantType rt = reader.type;
  const bool quantized_reader = reader.n_in > 0 && p.T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(rt);
  RowNormArgs na;
  na.x = p.x, na.y = add_y, na.w = w, na.eps = hp.rms_eps, na.rows = Ti, na.n = E, na.out = p.h;
  if (quantized_reader && add_rms_norm_quant_supports(E, act_quant_for(rt))) {
    a.quantized = true;
    a.mode = act_quant_for(rt);
    a.qs = p.hq;
    a.meta = p.hm;
    na.mode = a.mode, na.qs = p.hq, na.meta = p.hm;
    if (combine != nullptr) {
      moe_combine_add_rms_norm(*combine, na, s);
    } else {
      add_rms_norm_quant(na, s);
    }
  } else if (combine != nullptr) {
    moe_combine_add_rms_norm(*combine, na, s);
  } else {
    add_rms_norm(p.x, add_y, w, hp.rms_eps, Ti, E, p.h, s);
  }
  return a;
}

// Enqueues a micro-batch; no synchronisation unless a trace wants the routing.
void CudaSequence::enqueue(const Step& st) {
  const HParams& hp = m_.hp;
  const DeviceWeights& W = m_.w;
  cudaStream_t s = m_.stream;
  Pass p;
  p.st = &st;
  p.T = st.T;
  p.Ti = static_cast<int>(st.T);
  p.graph = st.host_ids == nullptr;
  ws_->reset();
  // Tiered: stream whole expert banks (prefill) or place each layer's experts (hybrid).
  p.stream_step = m_.tiering != nullptr && m_.tiering->options.stream_threshold > 0 &&
                  p.T >= m_.tiering->options.stream_threshold;
  if (p.stream_step) stage_next_layer(-1);
  if (m_.tiering != nullptr && !p.stream_step) m_.tiering->scheduler->begin_step(p.T);
  stage(p, "embed");
  const int E = static_cast<int>(hp.n_embd);
  take_step_buffers(p);
  const int32_t* ids_tok = nullptr;  // (T) token ids
  if (p.graph) {
    ids_tok = graph_.step_dev().as<int32_t>();
    p.pos_dev = graph_.step_dev().as<uint32_t>() + 1;
    MT_CUDA_CHECK(cudaMemcpyAsync(graph_.step_dev().get(), graph_.pinned_step(), 2 * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice, s));
  } else {
    int32_t* ids = ws_->take_n<int32_t>(p.T);
    MT_CUDA_CHECK(cudaMemcpyAsync(ids, st.host_ids, p.T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    ids_tok = ids;
  }
  if (!st.out_rows.empty()) {  // a batch's logits rows, gathered by gathered_logits
    MT_CHECK(st.out_rows.size() == st.rows);
    int32_t* rows = ws_->take_n<int32_t>(st.rows);
    MT_CUDA_CHECK(cudaMemcpyAsync(rows, st.out_rows.data(), st.rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    p.out_rows_dev = rows;
  }
  // Several sequences of one KV type: their rows' caches in one table (one prep launch and
  // one attention launch per stretch of decode tokens instead of a pair per sequence).
  if (st.seqs.size() > 1 && !p.graph &&
      std::all_of(st.seqs.begin(), st.seqs.end(), [&](const SeqRows& r) {
        return r.seq->kv_.type() == kv_.type() && r.seq->kv_.row_bytes() == kv_.row_bytes();
      })) {
    multi_kv_rows(p);
  }
  get_rows(W.token_embd.type, W.token_embd.data, W.token_embd.row_bytes, ids_tok, p.Ti, E, p.x, s);
  ActRows hx = add_norm(p, nullptr, W.layers[0].attn_norm, attn_reader(W.layers[0]));

  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    const DevLayer& L = W.layers[l];
    // The mixer into y, then the residual add fused with the FFN norm.
    if (L.recurrent) {
      stage(p, "gated delta net");
      gdn_layer(p, L, l, hx, p.y);
    } else if (L.mla) {
      mla_layer(p, L, l, hx);
    } else {
      attention_layer(p, L, l, hx);
    }
    stage(p, "ffn norm");
    hx = add_norm(p, p.y, L.ffn_norm, ffn_reader(L));

    // FFN: routed experts (+ shared) or dense, into y (or, MoE, combined in the next norm).
    MoeCombineIn combine;
    if (L.moe) {
      moe_layer(p, L, l, hx, combine);
    } else {
      stage(p, "dense ffn");
      ffn_dense(L.ffn_gate_up, L.ffn_gate, L.ffn_up, L.ffn_down, hx, p.gus, p.us, p.y);
    }
    stage(p, "add + norm");
    // Residual add fused with the next layer's attention norm (the output norm last).
    const MoeCombineIn* fused = combine.d != nullptr ? &combine : nullptr;
    if (l + 1 < hp.n_layer) {
      hx = add_norm(p, p.y, W.layers[l + 1].attn_norm, attn_reader(W.layers[l + 1]), fused);
    } else {
      const bool all_rows = st.rows == p.T && st.out_rows.empty();
      hx = add_norm(p, p.y, W.output_norm, all_rows ? W.output : DeviceMatrix{}, fused);
    }
  }
  stage(p, "output");
  output_logits(p, hx);
  stage(p, "end");
}

// The last st.rows rows of h, kLogitRows at a time into one (kLogitRows, n_vocab) buffer,
// each piece copied to the host before the next product overwrites it (the stream orders
// them). All rows: hx, with its quantized rows when it has them.
void CudaSequence::output_logits(Pass& p, const ActRows& hx) {
  const Step& st = *p.st;
  if (st.rows == 0) return;
  if (!st.out_rows.empty()) {
    gathered_logits(p);
    return;
  }
  const size_t V = m_.hp.n_vocab, E = m_.hp.n_embd;
  const uint32_t first = p.T - st.rows;
  float* lg = ws_->take_n<float>(std::min(st.rows, kLogitRows) * V);  // (<= kLogitRows, n_vocab)
  for (uint32_t r0 = 0; r0 < st.rows; r0 += kLogitRows) {
    const uint32_t n = std::min(kLogitRows, st.rows - r0);
    ActRows piece;
    piece.x = p.h + static_cast<size_t>(first + r0) * E;
    piece.rows = static_cast<int>(n);
    if (first == 0 && hx.quantized) {
      piece.quantized = true;
      piece.mode = hx.mode;
      piece.qs = hx.qs + static_cast<size_t>(r0) * E;
      piece.meta = hx.meta + static_cast<size_t>(r0) * (E / 32);
    }
    mm(m_.w.output, piece, lg);
    if (st.logits_dev != nullptr) {  // a batch graph's capture: the rows stay (one piece: T <= kLogitRows)
      MT_CHECK(st.rows <= kLogitRows);
      *st.logits_dev = lg;
      continue;
    }
    MT_CUDA_CHECK(cudaMemcpyAsync(st.host_logits + r0 * V, lg, n * V * sizeof(float), cudaMemcpyDeviceToHost, m_.stream));
    if (st.host_argmax != nullptr) {  // greedy decoding's pick, so that a caller needs no scan of the row
      int32_t* picks = ws_->take_n<int32_t>(n);
      rows_argmax(lg, static_cast<int>(n), static_cast<int>(V), picks, m_.stream);
      MT_CUDA_CHECK(cudaMemcpyAsync(st.host_argmax + r0, picks, n * sizeof(int32_t), cudaMemcpyDeviceToHost, m_.stream));
    }
  }
}

// The rows st.out_rows of h (a batch of sequences' last rows), kLogitRows at a time
// gathered into y (free after the last layer), through the output product and copied
// to the host in their order.
void CudaSequence::gathered_logits(Pass& p) {
  const Step& st = *p.st;
  const size_t V = m_.hp.n_vocab, E = m_.hp.n_embd;
  float* lg = ws_->take_n<float>(std::min(st.rows, kLogitRows) * V);  // (<= kLogitRows, n_vocab)
  for (uint32_t r0 = 0; r0 < st.rows; r0 += kLogitRows) {
    const uint32_t n = std::min(kLogitRows, st.rows - r0);
    get_rows(QuantType::F32, reinterpret_cast<const uint8_t*>(p.h), E * sizeof(float), p.out_rows_dev + r0,
             static_cast<int>(n), static_cast<int>(E), p.y, m_.stream);  // (n, n_embd)
    mm(m_.w.output, p.y, static_cast<int>(n), lg);
    MT_CUDA_CHECK(cudaMemcpyAsync(st.host_logits + r0 * V, lg, n * V * sizeof(float), cudaMemcpyDeviceToHost, m_.stream));
  }
}

// out = down(silu(gate h) * up h) for a dense FFN or the shared expert; gu (T, 2 ff)
// and act (T, ff) are scratch.
void CudaSequence::ffn_dense(const DeviceMatrix& gate_up, const DeviceMatrix& gate, const DeviceMatrix& up,
               const DeviceMatrix& down, const ActRows& h, float* gu, float* act, float* out) {
  const int ff = static_cast<int>(up.n_out);
  const int T = h.rows;
  if (gate_up.data != nullptr) {
    mm(gate_up, h, gu);
    swiglu_pairs(gu, T, ff, act, m_.stream);
  } else {
    if (gate.data) mm(gate, h, gu);
    mm(up, h, act);
    swiglu(gate.data ? gu : nullptr, act, static_cast<int64_t>(T) * ff, m_.stream);
  }
  mm(down, act, T, out);
}

}  // namespace mt::cuda::detail
