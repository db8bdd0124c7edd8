// CudaModel: weights upload and the forward pass on one stream (see cuda_model.h).
#include "cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
#include "cuda/check.h"
#include "cuda/host_memory.h"
#include "cuda/matmul.h"
#include "cuda/memory.h"
#include "cuda/ops.h"
#include "model/layers.h"

namespace mt::cuda {
namespace {

struct DevLayer {
  DeviceMatrix wq, wk, wv, wo;                       // (n_embd -> q_dim / kv_dim), (q_dim -> n_embd)
  DeviceMatrix router, gate_exps, up_exps, down_exps;  // experts: n_mat = n_expert
  DeviceMatrix shexp_gate, shexp_up, shexp_down;
  DeviceMatrix ffn_gate, ffn_up, ffn_down;
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *shexp_gate_inp = nullptr;
  bool moe = false;
};

constexpr uint64_t kAlign = 256;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

struct CudaModel::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  HParams hp;
  const ArchInfo* arch = nullptr;
  DeviceBuffer weights;       // every tensor, each at a 256-byte boundary
  uint64_t used = 0;
  DeviceMatrix token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DevLayer> layers;

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Bump placement inside `weights` (sized by a first pass with dry = true).
  template <class T>
  T* place(const void* host, uint64_t bytes, bool dry) {
    const uint64_t at = used;
    used = align_up(used + bytes);
    if (dry || bytes == 0) return nullptr;
    uint8_t* dst = weights.as<uint8_t>() + at;
    MT_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
    return reinterpret_cast<T*>(dst);
  }
  DeviceMatrix matrix(const Tensor& t, bool dry) {
    DeviceMatrix m;
    if (!t.present()) return m;
    m.type = t.type;
    m.n_in = static_cast<int64_t>(t.ne[0]);
    m.n_out = static_cast<int64_t>(t.ne[1]);
    m.n_mat = static_cast<int64_t>(t.ne[2]);
    m.row_bytes = t.row_bytes;
    m.matrix_bytes = t.matrix_bytes;
    m.data = place<uint8_t>(t.data, t.matrix_bytes * t.ne[2], dry);
    return m;
  }
  const float* vec(const std::vector<float>& v, bool dry) {
    return v.empty() ? nullptr : place<float>(v.data(), v.size() * sizeof(float), dry);
  }
  void upload(const Model& model, bool dry) {
    used = 0;
    const ModelWeights& w = model.weights();
    token_embd = matrix(w.token_embd, dry);
    output = w.output.present() ? matrix(w.output, dry) : token_embd;  // tied: the embedding itself
    output_norm = vec(model.output_norm(), dry);
    layers.assign(w.layers.size(), {});
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& lw = w.layers[l];
      const LayerVectors& lv = model.vectors()[l];
      DevLayer& d = layers[l];
      d.wq = matrix(lw.wq, dry), d.wk = matrix(lw.wk, dry), d.wv = matrix(lw.wv, dry), d.wo = matrix(lw.wo, dry);
      d.router = matrix(lw.router, dry);
      d.gate_exps = matrix(lw.gate_exps, dry), d.up_exps = matrix(lw.up_exps, dry);
      d.down_exps = matrix(lw.down_exps, dry);
      d.shexp_gate = matrix(lw.shexp_gate, dry), d.shexp_up = matrix(lw.shexp_up, dry);
      d.shexp_down = matrix(lw.shexp_down, dry);
      d.ffn_gate = matrix(lw.ffn_gate, dry), d.ffn_up = matrix(lw.ffn_up, dry), d.ffn_down = matrix(lw.ffn_down, dry);
      d.attn_norm = vec(lv.attn_norm, dry), d.ffn_norm = vec(lv.ffn_norm, dry);
      d.q_norm = vec(lv.q_norm, dry), d.k_norm = vec(lv.k_norm, dry);
      d.bq = vec(lv.bq, dry), d.bk = vec(lv.bk, dry), d.bv = vec(lv.bv, dry);
      d.shexp_gate_inp = vec(lv.shexp_gate_inp, dry);
      d.moe = lw.is_moe();
    }
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
    // Off unless MOETIER_CUDA_GRAPHS=1: re-capturing every step (the positions are kernel
    // parameters) measured slower than plain launches on the H200 (qwen3-30b-a3b q4_0
    // tg128: 129 vs 144 t/s); graphs pay once the step reads its position from the device
    // and one instantiated graph is replayed unchanged.
    const char* env = std::getenv("MOETIER_CUDA_GRAPHS");
    graphs_ = env != nullptr && std::string(env) == "1";
    if (graphs_ && (cudaHostAlloc(reinterpret_cast<void**>(&pinned_id_), sizeof(int32_t), cudaHostAllocDefault) != cudaSuccess ||
                    cudaHostAlloc(reinterpret_cast<void**>(&pinned_logits_), sizeof(float) * m.hp.n_vocab,
                                  cudaHostAllocDefault) != cudaSuccess)) {
      cudaGetLastError();
      log_warn("CUDA graphs off: cannot allocate their pinned buffers");
      graphs_ = false;
    }
  }
  ~CudaSequence() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (pinned_id_ != nullptr) cudaFreeHost(pinned_id_);
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
    for (uint32_t c0 = 0; c0 < T; c0 += CudaModel::kMicroBatch) {
      const uint32_t n = std::min(CudaModel::kMicroBatch, T - c0);
      const bool last = c0 + n == T;
      const uint32_t rows = all_logits ? n : (last ? 1 : 0);
      if (n != 1 || trace != nullptr || !eval_token_graph(tokens[c0], rows, logits)) {
        eval_chunk(tokens.subspan(c0, n), rows, logits, trace);
      }
      pos_ += n;
    }
    return {};
  }

 private:
  size_t workspace_bytes(uint32_t T) const {
    const HParams& hp = m_.hp;
    const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), K = std::max(1u, hp.n_expert_used);
    const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
    size_t floats = 4 * T * E + 2 * T * Q + 2 * T * KV + T * std::max(1u, hp.n_expert) + 2 * T * K + 2 * T * K * n_ff +
                    T * K * E + 2 * T * n_ff + static_cast<size_t>(T) * hp.n_vocab;
    size_t bytes = floats * sizeof(float) + 64 * kAlign;
    size_t scratch = attention_workspace_bytes(static_cast<int>(T), static_cast<int>(hp.n_head),
                                               static_cast<int>(hp.head_dim), n_ctx_);
    auto consider = [&](const DeviceMatrix& w) {
      if (w.data != nullptr) scratch = std::max(scratch, matmul_workspace_bytes(w, static_cast<int>(T), static_cast<int>(K)));
    };
    consider(m_.output);
    for (const DevLayer& d : m_.layers) {
      for (const DeviceMatrix* w : {&d.wq, &d.wk, &d.wv, &d.wo, &d.router, &d.gate_exps, &d.up_exps, &d.down_exps,
                                    &d.shexp_gate, &d.shexp_up, &d.shexp_down, &d.ffn_gate, &d.ffn_up, &d.ffn_down}) {
        consider(*w);
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
    enqueue(tokens.data(), static_cast<uint32_t>(tokens.size()), rows, logits->data() + at, trace);
    MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  }

  // One decode token through a CUDA graph (MOETIER_CUDA_GRAPHS=1): the step's ~30 launches
  // per layer captured and replayed as one (the previous step's executable graph updated in place when only
  // parameters changed: positions, split counts). Ids and logits go through pinned
  // buffers, as a captured copy needs. Returns false (nothing done) when graphs are off.
  bool eval_token_graph(int32_t token, uint32_t rows, std::vector<float>* logits) {
    if (!graphs_) return false;
    ensure_workspace(1);
    *pinned_id_ = token;
    cudaStream_t s = m_.stream;
    MT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enqueue(pinned_id_, 1, rows, pinned_logits_, nullptr);
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
    MT_CUDA_CHECK(cudaGraphLaunch(exec_, s));
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
    logits->assign(pinned_logits_, pinned_logits_ + static_cast<size_t>(rows) * m_.hp.n_vocab);
    return true;
  }

  // Enqueues a micro-batch: ids copied from host_ids, the last `rows` logits rows copied
  // to host_logits; no synchronisation unless a trace wants the routing.
  void enqueue(const int32_t* host_ids, uint32_t T, uint32_t rows, float* host_logits, Trace* trace) {
    const HParams& hp = m_.hp;
    const ArchInfo& arch = *m_.arch;
    cudaStream_t s = m_.stream;
    const int Ti = static_cast<int>(T);
    ws_->reset();
    const int E = static_cast<int>(hp.n_embd), Q = static_cast<int>(hp.q_dim()), KVd = static_cast<int>(hp.kv_dim());
    const int K = static_cast<int>(hp.n_expert_used), X = static_cast<int>(hp.n_expert);
    const int hd = static_cast<int>(hp.head_dim);
    // Step buffers (shapes beside them).
    int32_t* ids_tok = ws_->take_n<int32_t>(T);       // (T) token ids
    float* x = ws_->take_n<float>(T * E);             // (T, n_embd) residual stream
    float* h = ws_->take_n<float>(T * E);             // (T, n_embd) normed
    float* q = ws_->take_n<float>(T * Q);             // (T, q_dim)
    float* k = ws_->take_n<float>(T * KVd);           // (T, kv_dim)
    float* v = ws_->take_n<float>(T * KVd);           // (T, kv_dim)
    float* att = ws_->take_n<float>(T * Q);           // (T, q_dim)
    float* y = ws_->take_n<float>(T * E);             // (T, n_embd) sub-block output
    float* probs = ws_->take_n<float>(T * std::max(1, X));   // (T, n_expert) router logits
    int32_t* sel = ws_->take_n<int32_t>(T * std::max(1, K));  // (T, K) selected experts
    float* wts = ws_->take_n<float>(T * std::max(1, K));      // (T, K) their weights
    const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
    float* g = ws_->take_n<float>(T * std::max(1, K) * n_ff);  // (T*K, n_ff) gate rows
    float* u = ws_->take_n<float>(T * std::max(1, K) * n_ff);  // (T*K, n_ff) up rows
    float* d = ws_->take_n<float>(T * std::max(1, K) * E);     // (T*K, n_embd) down rows
    float* gs = ws_->take_n<float>(T * n_ff);                  // (T, n_ff_shexp) shared gate
    float* us = ws_->take_n<float>(T * n_ff);                  // (T, n_ff_shexp) shared up
    float* ds = ws_->take_n<float>(T * E);                     // (T, n_embd) shared down
    MT_CUDA_CHECK(cudaMemcpyAsync(ids_tok, host_ids, T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    get_rows(m_.token_embd.type, m_.token_embd.data, m_.token_embd.row_bytes, ids_tok, Ti, E, x, s);

    std::vector<int32_t> host_sel;
    std::vector<float> host_wts;
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
      const DevLayer& L = m_.layers[l];
      // Attention: norm, Q/K/V (+bias), q/k norm, RoPE, cache, attention, output.
      rms_norm(x, E, L.attn_norm, hp.rms_eps, Ti, E, h, E, s);
      mm(L.wq, h, Ti, q);
      mm(L.wk, h, Ti, k);
      mm(L.wv, h, Ti, v);
      if (L.bq) add_bias(q, L.bq, Ti, Q, s);
      if (L.bk) add_bias(k, L.bk, Ti, KVd, s);
      if (L.bv) add_bias(v, L.bv, Ti, KVd, s);
      if (arch.qk_norm == QkNorm::kPerHead) {
        rms_norm(q, hd, L.q_norm, hp.rms_eps, Ti * static_cast<int>(hp.n_head), hd, q, hd, s);
        rms_norm(k, hd, L.k_norm, hp.rms_eps, Ti * static_cast<int>(hp.n_head_kv), hd, k, hd, s);
      } else if (arch.qk_norm == QkNorm::kFullWidth) {
        rms_norm(q, Q, L.q_norm, hp.rms_eps, Ti, Q, q, Q, s);
        rms_norm(k, KVd, L.k_norm, hp.rms_eps, Ti, KVd, k, KVd, s);
      }
      const bool neox = arch.rope == RopeStyle::kNeox;
      rope(q, Ti, static_cast<int>(hp.n_head), hd, static_cast<int>(hp.n_rot), pos_, hp.rope_freq_base,
           hp.rope_freq_scale, neox, s);
      rope(k, Ti, static_cast<int>(hp.n_head_kv), hd, static_cast<int>(hp.n_rot), pos_, hp.rope_freq_base,
           hp.rope_freq_scale, neox, s);
      kv_store(kv_type_, k, Ti, KVd, k_[l].as<uint8_t>(), kv_row_bytes_, pos_, s);
      kv_store(kv_type_, v, Ti, KVd, v_[l].as<uint8_t>(), kv_row_bytes_, pos_, s);
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
      {
        const size_t mark = ws_->mark();
        attention(aa, *ws_, s);
        ws_->rewind(mark);
      }
      mm(L.wo, att, Ti, y);
      add(x, y, static_cast<int64_t>(T) * E, s);

      // FFN: routed experts (+ shared) or dense.
      rms_norm(x, E, L.ffn_norm, hp.rms_eps, Ti, E, h, E, s);
      if (L.moe) {
        const int ff = static_cast<int>(L.up_exps.n_out);
        mm(L.router, h, Ti, probs);
        router_topk(probs, Ti, X, K, arch.renormalize_topk, sel, wts, s);
        if (trace) {
          host_sel.resize(static_cast<size_t>(T) * K);
          host_wts.resize(static_cast<size_t>(T) * K);
          MT_CUDA_CHECK(cudaMemcpyAsync(host_sel.data(), sel, host_sel.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
          MT_CUDA_CHECK(cudaMemcpyAsync(host_wts.data(), wts, host_wts.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
          MT_CUDA_CHECK(cudaStreamSynchronize(s));
          for (uint32_t t = 0; t < T; ++t) {
            trace->routing(l, pos_ + t, {&host_sel[static_cast<size_t>(t) * K], static_cast<size_t>(K)},
                           {&host_wts[static_cast<size_t>(t) * K], static_cast<size_t>(K)});
          }
        }
        if (L.gate_exps.data) mm_experts(L.gate_exps, sel, Ti, K, h, false, g);
        mm_experts(L.up_exps, sel, Ti, K, h, false, u);
        swiglu(L.gate_exps.data ? g : nullptr, u, static_cast<int64_t>(T) * K * ff, s);
        mm_experts(L.down_exps, sel, Ti, K, u, true, d);
        const bool shared = L.shexp_up.data != nullptr;
        if (shared) {
          const int ffs = static_cast<int>(L.shexp_up.n_out);
          mm(L.shexp_gate, h, Ti, gs);
          mm(L.shexp_up, h, Ti, us);
          swiglu(gs, us, static_cast<int64_t>(T) * ffs, s);
          mm(L.shexp_down, us, Ti, ds);
        }
        moe_combine(d, wts, Ti, K, E, shared ? ds : nullptr, L.shexp_gate_inp, h, y, s);
      } else {
        const int ff = static_cast<int>(L.ffn_up.n_out);
        if (L.ffn_gate.data) mm(L.ffn_gate, h, Ti, g);
        mm(L.ffn_up, h, Ti, u);
        swiglu(L.ffn_gate.data ? g : nullptr, u, static_cast<int64_t>(T) * ff, s);
        mm(L.ffn_down, u, Ti, y);
      }
      add(x, y, static_cast<int64_t>(T) * E, s);
    }
    if (rows > 0) {
      const int V = static_cast<int>(hp.n_vocab);
      float* hn = ws_->take_n<float>(static_cast<size_t>(rows) * E);
      float* lg = ws_->take_n<float>(static_cast<size_t>(rows) * V);
      rms_norm(x + static_cast<size_t>(T - rows) * E, E, m_.output_norm, hp.rms_eps, static_cast<int>(rows), E, hn, E, s);
      mm(m_.output, hn, static_cast<int>(rows), lg);
      MT_CUDA_CHECK(cudaMemcpyAsync(host_logits, lg, static_cast<size_t>(rows) * V * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
    }
  }

  CudaModel::Impl& m_;
  uint32_t n_ctx_, pos_ = 0;
  QuantType kv_type_;
  uint64_t kv_row_bytes_;
  std::vector<DeviceBuffer> k_, v_;  // per layer (n_ctx, kv_dim) rows of kv_type
  std::unique_ptr<Workspace> ws_;
  uint32_t ws_tokens_ = 0;
  bool graphs_ = false;                 // decode tokens through CUDA graphs
  int32_t* pinned_id_ = nullptr;        // (1) pinned
  float* pinned_logits_ = nullptr;      // (n_vocab) pinned
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

CudaModel::CudaModel(const Model& m, std::unique_ptr<Impl> impl) : model_(m), impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

uint64_t CudaModel::weight_bytes() const { return impl_->used; }

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
  impl->upload(model, /*dry=*/true);
  const uint64_t need = impl->used;
  if (need > mem.free) {
    return out_of_range("the weights need " + std::to_string(need) + " bytes of device memory, " + mem.name + " has " +
                        std::to_string(mem.free) + " free");
  }
  impl->weights = DeviceBuffer(need);
  impl->upload(model, /*dry=*/false);
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
