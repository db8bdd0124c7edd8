// CudaModel: weights upload and the forward pass on one stream (see cuda_model.h).
#include "cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
#include "cuda/check.h"
#include "cuda/device_weights.h"
#include "cuda/host_memory.h"
#include "cuda/matmul.h"
#include "cuda/memory.h"
#include "cuda/ops.h"
#include "cuda/stage_timer.h"
#include "model/layers.h"

namespace mt::cuda {
struct CudaModel::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  HParams hp;
  const ArchInfo* arch = nullptr;
  DeviceWeights w;

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

Status check_tensor(const Tensor& t) {
  if (!t.present()) return {};
  if (t.interleaved) return invalid_argument(t.name + " is interleaved: load the model with interleave off for CUDA");
  if (!supports(t.type)) {
    return unimplemented(t.name + ": no CUDA kernels for type " + std::string(type_name(t.type)));
  }
  return {};
}

// One sequence: the device KV cache and the step buffers.
class CudaSequence final : public Evaluator {
 public:
  CudaSequence(CudaModel::Impl& m, uint32_t n_ctx, QuantType kv_type)
      : m_(m), n_ctx_(n_ctx), kv_type_(kv_type), kv_row_bytes_(*row_bytes(kv_type, m.hp.kv_dim())) {
    for (uint32_t l = 0; l < m.hp.n_layer; ++l) {
      k_.emplace_back(kv_row_bytes_ * n_ctx);
      v_.emplace_back(kv_row_bytes_ * n_ctx);
    }
    // Decode tokens replay one instantiated CUDA graph per span of kGraphSpan positions
    // (the position is read on the device); MOETIER_CUDA_GRAPHS=0 turns it off.
    const char* env = std::getenv("MOETIER_CUDA_GRAPHS");
    graphs_ = env == nullptr || std::string(env) != "0";
    if (graphs_ && (cudaHostAlloc(reinterpret_cast<void**>(&pinned_step_), 2 * sizeof(uint32_t),
                                  cudaHostAllocDefault) != cudaSuccess ||
                    cudaHostAlloc(reinterpret_cast<void**>(&pinned_logits_), sizeof(float) * m.hp.n_vocab,
                                  cudaHostAllocDefault) != cudaSuccess)) {
      cudaGetLastError();
      log_warn("CUDA graphs off: cannot allocate their pinned buffers");
      graphs_ = false;
    }
    step_dev_ = DeviceBuffer(2 * sizeof(uint32_t));
    if (const char* ub = std::getenv("MOETIER_CUDA_UBATCH"); ub != nullptr && std::atoi(ub) > 0) {
      micro_batch_ = static_cast<uint32_t>(std::atoi(ub));
    }
  }
  ~CudaSequence() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (pinned_step_ != nullptr) cudaFreeHost(pinned_step_);
    if (pinned_logits_ != nullptr) cudaFreeHost(pinned_logits_);
  }
  CudaSequence(const CudaSequence&) = delete;
  CudaSequence& operator=(const CudaSequence&) = delete;

  uint32_t position() const override { return pos_; }
  uint32_t n_ctx() const override { return n_ctx_; }

  Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) override {
    const HParams& hp = m_.hp;
    const auto T = static_cast<uint32_t>(tokens.size());
    if (T == 0) return invalid_argument("no tokens to evaluate");
    if (static_cast<uint64_t>(pos_) + T > n_ctx_) {
      return out_of_range("context full: " + std::to_string(pos_) + " + " + std::to_string(T) +
                          " tokens exceed the context of " + std::to_string(n_ctx_));
    }
    for (int32_t id : tokens) {
      if (id < 0 || static_cast<uint32_t>(id) >= hp.n_vocab) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                std::to_string(hp.n_vocab - 1) + ")");
      }
    }
    if (trace) trace->begin_step();
    MT_CUDA_CHECK(cudaSetDevice(m_.device));
    logits->clear();
    for (uint32_t c0 = 0; c0 < T; c0 += micro_batch_) {
      const uint32_t n = std::min(micro_batch_, T - c0);
      const bool last = c0 + n == T;
      const uint32_t rows = all_logits ? n : (last ? 1 : 0);
      if (n != 1 || rows != 1 || trace != nullptr || !eval_token_graph(tokens[c0], logits)) {
        eval_chunk(tokens.subspan(c0, n), rows, logits, trace);
      }
      pos_ += n;
    }
    return {};
  }

 private:
  static constexpr uint32_t kGraphSpan = 256;  // positions one decode graph serves

  size_t workspace_bytes(uint32_t T) const {
    const HParams& hp = m_.hp;
    const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), K = std::max(1u, hp.n_expert_used);
    const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
    const size_t floats = 4 * T * E + 2 * T * Q + 2 * T * KV + T * (Q + 2 * KV) + T * std::max(1u, hp.n_expert) +
                          2 * T * K + 3 * T * K * n_ff + T * K * E + 3 * T * n_ff + static_cast<size_t>(T) * hp.n_vocab +
                          T * E + T * K * n_ff;  // the last two: h's and u's quants and scales
    const size_t bytes = floats * sizeof(float) + 64 * 256;
    size_t scratch = attention_workspace_bytes(static_cast<int>(T), static_cast<int>(hp.n_head),
                                               static_cast<int>(hp.head_dim), n_ctx_);
    for (const DeviceMatrix* w : m_.w.matrices()) {
      if (w->data != nullptr) {
        scratch = std::max(scratch, matmul_workspace_bytes(*w, static_cast<int>(T), static_cast<int>(K)));
      }
    }
    return bytes + scratch;
  }

  // Matrix product whose scratch is given back as soon as it is launched.
  void mm(const DeviceMatrix& w, const float* x, int n, float* y) {
    const size_t mark = ws_->mark();
    matmul(w, 0, x, n, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  void mm_experts(const DeviceMatrix& w, const int32_t* ids, int n, int K, const float* x, bool per_slot, float* y) {
    const size_t mark = ws_->mark();
    matmul_experts(w, ids, n, K, x, per_slot, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  // The same over rows that may be quantized already (cuda/matmul.h ActRows).
  void mm(const DeviceMatrix& w, const ActRows& x, float* y) {
    const size_t mark = ws_->mark();
    matmul(w, x, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  void mm_experts(const DeviceMatrix& w, const int32_t* ids, int K, const ActRows& x, float* y, bool per_slot = false) {
    const size_t mark = ws_->mark();
    matmul_experts(w, ids, K, x, per_slot, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }

  void ensure_workspace(uint32_t T) {
    if (T > ws_tokens_) {
      ws_.reset();
      ws_ = std::make_unique<Workspace>(workspace_bytes(std::max(T, 8u)));
      ws_tokens_ = std::max(T, 8u);
    }
  }

  // A micro-batch on the stream, synchronously.
  void eval_chunk(std::span<const int32_t> tokens, uint32_t rows, std::vector<float>* logits, Trace* trace) {
    const size_t at = logits->size();
    logits->resize(at + static_cast<size_t>(rows) * m_.hp.n_vocab);
    ensure_workspace(static_cast<uint32_t>(tokens.size()));
    Step step;
    step.host_ids = tokens.data();
    step.T = static_cast<uint32_t>(tokens.size());
    step.rows = rows;
    step.host_logits = logits->data() + at;
    step.trace = trace;
    enqueue(step);
    MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
    timer_.step_done(step.T);
  }

  // One decode token by replaying the graph of its span of positions: the step's
  // launches captured once (token id and position read from step_dev_, copied there from
  // pinned memory by the graph's first node) and replayed unchanged at every position
  // of the span; a new span re-captures and updates the executable graph in place.
  // Returns false (nothing done) when graphs are off.
  bool eval_token_graph(int32_t token, std::vector<float>* logits) {
    if (!graphs_) return false;
    const uint32_t cap = std::min(n_ctx_, (pos_ / kGraphSpan + 1) * kGraphSpan);
    ensure_workspace(1);
    cudaStream_t s = m_.stream;
    if (exec_ == nullptr || cap != graph_cap_) {
      Step step;
      step.T = 1;
      step.rows = 1;
      step.host_logits = pinned_logits_;
      step.graph_n_kv_cap = cap;
      graph_timer_.forget_marks();
      MT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      enqueue(step);
      cudaGraph_t graph = nullptr;
      MT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      bool updated = false;
      if (exec_ != nullptr) {
        cudaGraphExecUpdateResultInfo info{};
        updated = cudaGraphExecUpdate(exec_, graph, &info) == cudaSuccess;
        if (!updated) {
          cudaGetLastError();
          MT_CUDA_CHECK(cudaGraphExecDestroy(exec_));
          exec_ = nullptr;
        }
      }
      if (!updated) MT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
      MT_CUDA_CHECK(cudaGraphDestroy(graph));
      graph_cap_ = cap;
    }
    pinned_step_[0] = static_cast<uint32_t>(token);
    pinned_step_[1] = pos_;
    timer_.mark("decode graph", s);
    MT_CUDA_CHECK(cudaGraphLaunch(exec_, s));
    timer_.mark("end", s);
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
    timer_.step_done(1);
    graph_timer_.replayed(1);
    logits->assign(pinned_logits_, pinned_logits_ + m_.hp.n_vocab);
    return true;
  }

  struct Step {
    const int32_t* host_ids = nullptr;  // (T) ids; null: a graph step (id and position from pinned_step_)
    uint32_t T = 0, rows = 0;           // tokens, logits rows wanted (the last `rows`)
    float* host_logits = nullptr;       // (rows, n_vocab)
    Trace* trace = nullptr;
    uint32_t graph_n_kv_cap = 0;        // graph step: positions its attention split covers
  };

  // Enqueues a micro-batch; no synchronisation unless a trace wants the routing.
  void enqueue(const Step& st) {
    const HParams& hp = m_.hp;
    const ArchInfo& arch = *m_.arch;
    const DeviceWeights& W = m_.w;
    cudaStream_t s = m_.stream;
    const uint32_t T = st.T;
    const int Ti = static_cast<int>(T);
    const bool graph = st.host_ids == nullptr;
    ws_->reset();
    auto stage = [&](const char* name) { (graph ? graph_timer_ : timer_).mark(name, s); };
    stage("embed");
    const int E = static_cast<int>(hp.n_embd), Q = static_cast<int>(hp.q_dim()), KVd = static_cast<int>(hp.kv_dim());
    const int K = static_cast<int>(hp.n_expert_used), X = static_cast<int>(hp.n_expert);
    const int hd = static_cast<int>(hp.head_dim);
    const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
    const size_t Kc = static_cast<size_t>(std::max(1, K));
    // Step buffers (shapes beside them).
    float* x = ws_->take_n<float>(T * E);                 // (T, n_embd) residual stream
    float* h = ws_->take_n<float>(T * E);                 // (T, n_embd) normed
    float* qkv = ws_->take_n<float>(T * (Q + 2 * KVd));   // (T, q_dim + 2 kv_dim) projections
    float* q = ws_->take_n<float>(T * Q);                 // (T, q_dim) roped queries
    float* att = ws_->take_n<float>(T * Q);               // (T, q_dim)
    float* y = ws_->take_n<float>(T * E);                 // (T, n_embd) sub-block output
    float* probs = ws_->take_n<float>(T * std::max(1, X));  // (T, n_expert) router logits
    int32_t* sel = ws_->take_n<int32_t>(T * Kc);          // (T, K) selected experts
    float* wts = ws_->take_n<float>(T * Kc);              // (T, K) their weights
    float* gu = ws_->take_n<float>(T * Kc * 2 * n_ff);    // (T*K, 2 n_ff) gate | up rows
    float* u = ws_->take_n<float>(T * Kc * n_ff);         // (T*K, n_ff) activated rows
    float* d = ws_->take_n<float>(T * Kc * E);            // (T*K, n_embd) down rows
    float* gus = ws_->take_n<float>(T * 2 * n_ff);        // (T, 2 n_ff) shared / dense gate | up
    float* us = ws_->take_n<float>(T * n_ff);             // (T, n_ff)
    float* ds = ws_->take_n<float>(T * E);                // (T, n_embd) shared down
    int8_t* hq = ws_->take_n<int8_t>(T * E);              // (T, n_embd) h quantized for its next reader
    uint2* hm = ws_->take_n<uint2>(T * E / 32 + 1);       // (T, n_embd / 32) their scales and sums
    int8_t* uq = ws_->take_n<int8_t>(T * Kc * n_ff);      // (T*K, n_ff) u quantized for the down product
    uint2* um = ws_->take_n<uint2>(T * Kc * n_ff / 32 + 1);  // (T*K, n_ff / 32)
    // x += y, h = rms_norm(x) * w; for a decode step also h quantized in the mode of the
    // product that reads it next (one launch instead of a norm and a quantize).
    // combine set: y is that MoE combine, computed in the same launch (n_embd >= 256).
    auto norm = [&](const float* add_y, const float* w, const DeviceMatrix& reader,
                    const MoeCombineIn* combine = nullptr) {
      ActRows a;
      a.x = h;
      a.rows = Ti;
      const QuantType rt = reader.type;
      const bool quantized_reader =
          reader.data != nullptr && T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(rt);
      if (quantized_reader && add_rms_norm_quant_supports(E, act_quant_for(rt))) {
        a.quantized = true;
        a.mode = act_quant_for(rt);
        a.qs = hq;
        a.meta = hm;
        if (combine != nullptr) {
          moe_combine_add_rms_norm(*combine, x, w, hp.rms_eps, Ti, E, h, true, a.mode, hq, hm, s);
        } else {
          add_rms_norm_quant(x, add_y, w, hp.rms_eps, Ti, E, h, a.mode, hq, hm, s);
        }
      } else if (combine != nullptr) {
        moe_combine_add_rms_norm(*combine, x, w, hp.rms_eps, Ti, E, h, false, ActQuant::kQ8_0, nullptr, nullptr, s);
      } else {
        add_rms_norm(x, add_y, w, hp.rms_eps, Ti, E, h, s);
      }
      return a;
    };
    auto attn_reader = [&](const DevLayer& L) -> const DeviceMatrix& { return L.wqkv.data ? L.wqkv : L.wq; };
    auto ffn_reader = [&](const DevLayer& L) -> const DeviceMatrix& {
      if (L.moe) return L.gate_up_exps.data ? L.gate_up_exps : L.up_exps;
      return L.ffn_gate_up.data ? L.ffn_gate_up : L.ffn_up;
    };
    const int32_t* ids_tok = nullptr;                     // (T) token ids
    const uint32_t* pos_dev = nullptr;                    // graph step: (1) position
    if (graph) {
      MT_CUDA_CHECK(cudaMemcpyAsync(step_dev_.get(), pinned_step_, 2 * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
      ids_tok = step_dev_.as<int32_t>();
      pos_dev = step_dev_.as<uint32_t>() + 1;
    } else {
      int32_t* ids = ws_->take_n<int32_t>(T);
      MT_CUDA_CHECK(cudaMemcpyAsync(ids, st.host_ids, T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
      ids_tok = ids;
    }
    get_rows(W.token_embd.type, W.token_embd.data, W.token_embd.row_bytes, ids_tok, Ti, E, x, s);
    ActRows hx = norm(nullptr, W.layers[0].attn_norm, attn_reader(W.layers[0]));

    std::vector<int32_t> host_sel;
    std::vector<float> host_wts;
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
      const DevLayer& L = W.layers[l];
      // Attention: Q/K/V (one product when stacked), bias + q/k norm + RoPE + cache store
      // in one launch, attention, output; then the residual add fused with the FFN norm.
      stage("qkv");
      AttnPrepArgs pa;
      if (L.wqkv.data != nullptr) {
        mm(L.wqkv, hx, qkv);
        pa.q_src = qkv, pa.k_src = qkv + Q, pa.v_src = qkv + Q + KVd;
        pa.q_stride = pa.k_stride = pa.v_stride = Q + 2 * KVd;
      } else {
        float* qr = qkv;                                   // (T, q_dim)
        float* kr = qkv + static_cast<size_t>(T) * Q;      // (T, kv_dim)
        float* vr = kr + static_cast<size_t>(T) * KVd;     // (T, kv_dim)
        mm(L.wq, hx, qr);
        mm(L.wk, hx, kr);
        mm(L.wv, hx, vr);
        pa.q_src = qr, pa.k_src = kr, pa.v_src = vr;
        pa.q_stride = Q, pa.k_stride = pa.v_stride = KVd;
      }
      pa.bq = L.bq, pa.bk = L.bk, pa.bv = L.bv;
      if (arch.qk_norm == QkNorm::kPerHead) {
        pa.q_norm = L.q_norm, pa.k_norm = L.k_norm;
      } else if (arch.qk_norm == QkNorm::kFullWidth) {  // over the whole q / k row, after the bias
        MT_CHECK(L.bq == nullptr && L.bk == nullptr);
        float* qs = const_cast<float*>(pa.q_src);
        float* ks = const_cast<float*>(pa.k_src);
        rms_norm(qs, pa.q_stride, L.q_norm, hp.rms_eps, Ti, Q, qs, pa.q_stride, s);
        rms_norm(ks, pa.k_stride, L.k_norm, hp.rms_eps, Ti, KVd, ks, pa.k_stride, s);
      }
      pa.eps = hp.rms_eps;
      pa.n_tokens = Ti;
      pa.n_head = static_cast<int>(hp.n_head);
      pa.n_head_kv = static_cast<int>(hp.n_head_kv);
      pa.head_dim = hd;
      pa.n_rot = static_cast<int>(hp.n_rot);
      pa.freq_base = hp.rope_freq_base;
      pa.freq_scale = hp.rope_freq_scale;
      pa.neox = arch.rope == RopeStyle::kNeox;
      pa.pos0 = pos_;
      pa.pos_dev = pos_dev;
      pa.q_out = q;
      pa.k_cache = k_[l].as<uint8_t>();
      pa.v_cache = v_[l].as<uint8_t>();
      pa.kv_type = kv_type_;
      pa.row_bytes = kv_row_bytes_;
      stage("attn prep");
      attn_prep(pa, s);
      stage("attention");
      AttentionArgs aa;
      aa.q = q;
      aa.k_cache = k_[l].as<uint8_t>();
      aa.v_cache = v_[l].as<uint8_t>();
      aa.kv_type = kv_type_;
      aa.kv_row_bytes = kv_row_bytes_;
      aa.n_tokens = Ti;
      aa.n_head = static_cast<int>(hp.n_head);
      aa.n_head_kv = static_cast<int>(hp.n_head_kv);
      aa.head_dim = hd;
      aa.pos0 = pos_;
      aa.out = att;
      aa.pos_dev = pos_dev;
      aa.n_kv_cap = st.graph_n_kv_cap;
      {
        const size_t mark = ws_->mark();
        attention(aa, *ws_, s);
        ws_->rewind(mark);
      }
      stage("wo");
      mm(L.wo, att, Ti, y);
      stage("ffn norm");
      hx = norm(y, L.ffn_norm, ffn_reader(L));

      // FFN: routed experts (+ shared) or dense, into y (or, MoE, combined in the next norm).
      MoeCombineIn combine;
      if (L.moe) {
        const int ff = static_cast<int>(L.up_exps.n_out);
        stage("router");
        mm(L.router, h, Ti, probs);
        stage("router top-k");
        router_topk(probs, Ti, X, K, arch.renormalize_topk, sel, wts, s);
        if (st.trace) {
          host_sel.resize(static_cast<size_t>(T) * K);
          host_wts.resize(static_cast<size_t>(T) * K);
          MT_CUDA_CHECK(cudaMemcpyAsync(host_sel.data(), sel, host_sel.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
          MT_CUDA_CHECK(cudaMemcpyAsync(host_wts.data(), wts, host_wts.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
          MT_CUDA_CHECK(cudaStreamSynchronize(s));
          for (uint32_t t = 0; t < T; ++t) {
            st.trace->routing(l, pos_ + t, {&host_sel[static_cast<size_t>(t) * K], static_cast<size_t>(K)},
                              {&host_wts[static_cast<size_t>(t) * K], static_cast<size_t>(K)});
          }
        }
        const int64_t slots = static_cast<int64_t>(T) * K;
        stage("experts gate+up");
        ActRows act;  // (T*K, ff) the down projection's input
        act.x = u;
        act.rows = static_cast<int>(slots);
        const QuantType dt = L.down_exps.type;
        const bool quant_down = T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(dt) &&
                                swiglu_pairs_quant_supports(ff, act_quant_for(dt));
        if (L.gate_up_exps.data != nullptr && quant_down) {
          mm_experts(L.gate_up_exps, sel, K, hx, gu);
          act.quantized = true;
          act.mode = act_quant_for(dt);
          act.qs = uq;
          act.meta = um;
          swiglu_pairs_quant(gu, slots, ff, u, act.mode, uq, um, s);
        } else if (L.gate_up_exps.data != nullptr) {
          mm_experts(L.gate_up_exps, sel, K, hx, gu);
          swiglu_pairs(gu, slots, ff, u, s);
        } else {
          if (L.gate_exps.data) mm_experts(L.gate_exps, sel, K, hx, gu);
          mm_experts(L.up_exps, sel, K, hx, u);
          swiglu(L.gate_exps.data ? gu : nullptr, u, slots * ff, s);
        }
        stage("experts down");
        mm_experts(L.down_exps, sel, K, act, d, /*per_slot=*/true);
        stage("shared + combine");  // moe_combine (+ the shared expert)
        const bool shared = L.shexp_up.data != nullptr;
        if (shared) ffn_dense(L.shexp_gate_up, L.shexp_gate, L.shexp_up, L.shexp_down, hx, gus, us, ds);
        if (E >= 256 && add_rms_norm_quant_supports(E, ActQuant::kQ8_0)) {  // fused into the norm below
          combine.d = d, combine.weights = wts, combine.K = K;
          combine.d_sh = shared ? ds : nullptr, combine.gate_inp = L.shexp_gate_inp, combine.h = h;
        } else {
          moe_combine(d, wts, Ti, K, E, shared ? ds : nullptr, L.shexp_gate_inp, h, y, s);
        }
      } else {
        stage("dense ffn");
        ffn_dense(L.ffn_gate_up, L.ffn_gate, L.ffn_up, L.ffn_down, hx, gus, us, y);
      }
      stage("add + norm");
      // Residual add fused with the next layer's attention norm (the output norm last).
      const MoeCombineIn* fused = combine.d != nullptr ? &combine : nullptr;
      if (l + 1 < hp.n_layer) {
        hx = norm(y, W.layers[l + 1].attn_norm, attn_reader(W.layers[l + 1]), fused);
      } else {
        hx = norm(y, W.output_norm, st.rows == T ? W.output : DeviceMatrix{}, fused);
      }
    }
    stage("output");
    if (st.rows > 0) {
      const int V = static_cast<int>(hp.n_vocab);
      float* lg = ws_->take_n<float>(static_cast<size_t>(st.rows) * V);
      if (st.rows == T) {
        mm(W.output, hx, lg);
      } else {
        mm(W.output, h + static_cast<size_t>(T - st.rows) * E, static_cast<int>(st.rows), lg);
      }
      MT_CUDA_CHECK(cudaMemcpyAsync(st.host_logits, lg, static_cast<size_t>(st.rows) * V * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
    }
    stage("end");
  }

  // out = down(silu(gate h) * up h) for a dense FFN or the shared expert; gu (T, 2 ff)
  // and act (T, ff) are scratch.
  void ffn_dense(const DeviceMatrix& gate_up, const DeviceMatrix& gate, const DeviceMatrix& up,
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

  CudaModel::Impl& m_;
  uint32_t n_ctx_, pos_ = 0;
  QuantType kv_type_;
  uint64_t kv_row_bytes_;
  std::vector<DeviceBuffer> k_, v_;  // per layer (n_ctx, kv_dim) rows of kv_type
  std::unique_ptr<Workspace> ws_;
  uint32_t ws_tokens_ = 0;
  bool graphs_ = false;                 // decode tokens through CUDA graphs
  uint32_t* pinned_step_ = nullptr;     // (2) pinned: token id, position
  float* pinned_logits_ = nullptr;      // (n_vocab) pinned
  DeviceBuffer step_dev_;               // (2) the graph's copy of pinned_step_
  cudaGraphExec_t exec_ = nullptr;
  uint32_t graph_cap_ = 0;              // n_kv_cap exec_ was captured for
  StageTimer timer_;                    // MOETIER_CUDA_PROFILE=1
  StageTimer graph_timer_{"cuda stage times in the decode graph"};
  uint32_t micro_batch_ = CudaModel::kMicroBatch;  // MOETIER_CUDA_UBATCH overrides (tuning)
};

}  // namespace

CudaModel::CudaModel(const Model& m, std::unique_ptr<Impl> impl) : model_(m), impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

uint64_t CudaModel::weight_bytes() const { return impl_->w.bytes(); }

StatusOr<std::unique_ptr<CudaModel>> CudaModel::load(const Model& model, const CudaOptions& options) {
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(options.device));
  const ModelWeights& w = model.weights();
  MT_RETURN_IF_ERROR(check_tensor(w.token_embd));
  MT_RETURN_IF_ERROR(check_tensor(w.output));
  for (const LayerWeights& lw : w.layers) {
    for (const Tensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.router, &lw.gate_exps, &lw.up_exps, &lw.down_exps,
                            &lw.shexp_gate, &lw.shexp_up, &lw.shexp_down, &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down}) {
      MT_RETURN_IF_ERROR(check_tensor(*t));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  impl->hp = model.hparams();
  impl->arch = &arch_info(model.hparams().arch);
  MT_CUDA_CHECK(cudaSetDevice(options.device));
  const uint64_t need = DeviceWeights::bytes_needed(model);
  if (need > mem.free) {
    return out_of_range("the weights need " + std::to_string(need) + " bytes of device memory, " + mem.name + " has " +
                        std::to_string(mem.free) + " free");
  }
  impl->w.upload(model);
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  return std::unique_ptr<CudaModel>(new CudaModel(model, std::move(impl)));
}

StatusOr<std::unique_ptr<Evaluator>> CudaModel::new_sequence(uint32_t n_ctx, QuantType kv_type) {
  if (n_ctx == 0) return invalid_argument("context size must be positive");
  if (kv_type != QuantType::F16 && kv_type != QuantType::Q8_0 && kv_type != QuantType::F32) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " is not f16, q8_0 or f32");
  }
  const uint64_t block = type_traits(kv_type).block_elems;
  if (block > 1 && impl_->hp.head_dim % block != 0) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " needs a head size that is a multiple of " +
                            std::to_string(block));
  }
  MT_CUDA_CHECK(cudaSetDevice(impl_->device));
  const uint64_t kv_bytes = 2ull * impl_->hp.n_layer * *row_bytes(kv_type, impl_->hp.kv_dim()) * n_ctx;
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(impl_->device));
  if (kv_bytes > mem.free) {
    return out_of_range("the KV cache for " + std::to_string(n_ctx) + " tokens at " + type_name(kv_type) + " needs " +
                        std::to_string(kv_bytes) + " bytes of device memory, " + std::to_string(mem.free) + " are free");
  }
  return std::unique_ptr<Evaluator>(new CudaSequence(*impl_, n_ctx, kv_type));
}

}  // namespace mt::cuda
