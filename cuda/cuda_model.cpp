// CudaModel: weights upload and the forward pass on one stream (see cuda_model.h).
#include "cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
#include "cuda/check.h"
#include "cuda/device_weights.h"
#include "cuda/expert_cache.h"
#include "cuda/host_memory.h"
#include "cuda/matmul.h"
#include "cuda/memory.h"
#include "cuda/ops.h"
#include "cuda/stage_timer.h"
#include "cuda/tiering.h"
#include "model/layers.h"

namespace mt::cuda {
struct CudaModel::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  HParams hp;
  const ArchInfo* arch = nullptr;
  DeviceWeights w;
  // The decode step's completion counters, zero between launches (each launch leaves them
  // zero): router_fused's (1) and the fused decode attention merge's (kAttnDecodeCounters).
  DeviceBuffer router_counter, decode_counters;
  const Model* host = nullptr;       // the host model (its CPU experts and thread pool)
  bool experts_on_host = false;      // CudaOptions::experts_on_host
  CudaTiering* tiering = nullptr;    // set_tiering(); required when experts_on_host

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
      const bool recurrent = m.hp.is_recurrent(l);  // Gated DeltaNet: states, no rows
      k_.emplace_back(recurrent ? 0 : kv_row_bytes_ * n_ctx);
      v_.emplace_back(recurrent ? 0 : kv_row_bytes_ * n_ctx);
      conv_.emplace_back(recurrent ? sizeof(float) * m.hp.conv_state_floats() : 0);
      delta_.emplace_back(recurrent ? sizeof(float) * m.hp.delta_state_floats() : 0);
      for (DeviceBuffer* b : {&conv_.back(), &delta_.back()}) {
        if (b->bytes() > 0) MT_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
      }
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
    if (m.tiering != nullptr) {
      graphs_ = false;  // a hybrid step waits for its routing on the host
      alloc_tiering_buffers();
    }
    // The decode fusions of the router (product + top-k) and of the attention merge are off
    // unless asked for (=1): measured on the H200 (qwen3-30b-a3b q4_k_m tg128) the merge
    // fused into the partial kernels cost 7% (282.5 vs 303.2 t/s) and the fused router
    // gained nothing (303.2 vs 305.5 with both off); docs/PERFORMANCE.md.
    auto env_on = [](const char* name) { return std::getenv(name) != nullptr && std::string(std::getenv(name)) == "1"; };
    fused_router_ = env_on("MOETIER_CUDA_FUSED_ROUTER");
    fused_attention_merge_ = env_on("MOETIER_CUDA_FUSED_ATTN");
    if (const char* ub = std::getenv("MOETIER_CUDA_UBATCH"); ub != nullptr && std::atoi(ub) > 0) {
      micro_batch_ = static_cast<uint32_t>(std::atoi(ub));
    }
  }
  ~CudaSequence() override {
    if (m_.tiering != nullptr) {
      cudaStreamSynchronize(m_.stream);
      free_tiering_buffers();
    }
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
    // Tiered: a batch below the streaming threshold goes through the hybrid step in pieces
    // of up to kMmvqMaxTokens; a larger one streams the expert banks once per micro-batch.
    uint32_t micro = micro_batch_;
    if (m_.tiering != nullptr) {
      const uint32_t thr = m_.tiering->options.stream_threshold;
      micro = thr > 0 && T >= thr ? std::max(micro_batch_, CudaModel::kStreamMicroBatch)
                                  : static_cast<uint32_t>(kMmvqMaxTokens);
    }
    for (uint32_t c0 = 0; c0 < T; c0 += micro) {
      const uint32_t n = std::min(micro, T - c0);
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
  static constexpr uint32_t kLogitRows = 256;  // logits rows per output product (one (kLogitRows, n_vocab) buffer)

  size_t workspace_bytes(uint32_t T) const {
    const HParams& hp = m_.hp;
    const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), K = std::max(1u, hp.n_expert_used);
    const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
    const size_t floats = 4 * T * E + 2 * T * Q + 2 * T * KV + T * (Q + 2 * KV) + T * std::max(1u, hp.n_expert) +
                          2 * T * K + 3 * T * K * n_ff + T * K * E + 3 * T * n_ff +
                          static_cast<size_t>(std::min(T, kLogitRows)) * hp.n_vocab +  // the logits piece
                          T * E + T * K * n_ff;  // the last two: h's and u's quants and scales
    const size_t C = hp.ssm_conv_dim(), Vd = hp.ssm_value_dim(), nv = hp.ssm_nv;
    const size_t gdn_floats = hp.recurrent.empty() ? 0 : T * (2 * C + 2 * Vd + 6 * nv + 3 * Q);  // see gdn_layer
    const size_t bytes = (floats + gdn_floats) * sizeof(float) + 64 * 256;
    size_t scratch = attention_workspace_bytes(static_cast<int>(T), static_cast<int>(hp.n_head),
                                               static_cast<int>(hp.head_dim), n_ctx_);
    for (const DeviceMatrix* w : m_.w.matrices()) {
      if (w->data != nullptr || (m_.experts_on_host && w->n_in > 0)) {  // tiered experts: their shapes
        scratch = std::max(scratch, matmul_workspace_bytes(*w, static_cast<int>(T), static_cast<int>(K)));
        if (w->data == nullptr && w->n_mat > 1) {  // as a gate | up pair
          DeviceMatrix pair = *w;
          pair.n_out *= 2;
          scratch = std::max(scratch, matmul_workspace_bytes(pair, static_cast<int>(T), static_cast<int>(K)));
        }
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

  // ---- tiered MoE layers (cuda/tiering.h)

  // A layer's expert matrices as the products read them.
  struct ExpertMats {
    DeviceMatrix gate, up, down, gate_up;
  };
  static ExpertMats mats_of(const ExpertViews& v) { return {v.gate, v.up, v.down, v.gate_up}; }

  // The CPU's share of a hybrid layer-step: its (expert, token) jobs and the slot row
  // (token * K + rank) each result goes to.
  struct HybridPart {
    std::vector<ExpertJob> jobs;
    std::vector<int32_t> rows;
    uint32_t n_device = 0;  // slots computed on the device from cache slots
    int staged_buf = -1;    // stream mode: the staging buffer of this step's refused misses
  };

  // Routing to the host (ids and the normed rows: a few KB, the step's one wait per
  // layer), the scheduler's placement, admissions queued on the copy stream, and the slot
  // ids (-1: the CPU's) uploaded for the grouped products.
  HybridPart place_hybrid(uint32_t l, uint32_t T, const int32_t* sel, const float* h, const float* wts) {
    CudaTiering& tier = *m_.tiering;
    cudaStream_t s = m_.stream;
    const uint32_t K = m_.hp.n_expert_used, E = m_.hp.n_embd;
    MT_CHECK(T <= static_cast<uint32_t>(kMmvqMaxTokens));
    MT_CUDA_CHECK(cudaMemcpyAsync(pin_sel_, sel, sizeof(int32_t) * T * K, cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(pin_h_, h, sizeof(float) * T * E, cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
    (void)wts;
    std::vector<uint32_t> count(m_.hp.n_expert, 0);
    for (uint32_t i = 0; i < T * K; ++i) ++count[static_cast<uint32_t>(pin_sel_[i])];
    tasks_.clear();
    for (uint32_t e = 0; e < m_.hp.n_expert; ++e) {
      if (count[e] > 0) tasks_.push_back({e, count[e]});
    }
    placed_.clear();
    tier.scheduler->place(l, tasks_, placed_);
    slot_of_.assign(m_.hp.n_expert, -1);
    // The compute stream waits for the copies into this layer's slots queued by earlier
    // steps (usually done long ago); this step's admissions are waited for only when an
    // admitted expert is also computed on the device now (large batches).
    bool device_waits_for_copy = false;
    for (const Placement& p : placed_) device_waits_for_copy |= p.on_device && p.copy;
    if (!device_waits_for_copy) tier.cache->wait_layer(l, s);
    staged_.clear();
    staged_of_.assign(m_.hp.n_expert, false);
    for (const Placement& p : placed_) {
      if (p.copy && p.slot >= 0) tier.cache->admit(l, p.expert, p.slot);
      if (p.on_device && p.slot >= 0) slot_of_[p.expert] = p.slot;
      if (p.on_device && p.slot < 0) {  // stream mode, refused by the policy: through staging
        staged_.push_back(p.expert);
        staged_of_[p.expert] = true;
      }
    }
    if (device_waits_for_copy) tier.cache->wait_layer(l, s);
    HybridPart part;
    for (uint32_t i = 0; i < T * K; ++i) {
      const auto e = static_cast<uint32_t>(pin_sel_[i]);
      const int32_t slot = slot_of_[e];
      pin_slot_ids_[i] = slot;
      pin_stage_ids_[i] = staged_of_[e] ? static_cast<int32_t>(e) : -1;
      if (slot >= 0) {
        ++part.n_device;
      } else if (staged_of_[e]) {
        // computed from the staging buffer
      } else {
        part.jobs.push_back({static_cast<uint32_t>(pin_sel_[i]), i / K});
        part.rows.push_back(static_cast<int32_t>(i));
      }
    }
    MT_CUDA_CHECK(cudaMemcpyAsync(slot_ids_dev_.get(), pin_slot_ids_, sizeof(int32_t) * T * K, cudaMemcpyHostToDevice, s));
    if (!staged_.empty()) {
      part.staged_buf = tier.cache->stage_experts(l, staged_);
      MT_CUDA_CHECK(
          cudaMemcpyAsync(stage_ids_dev_.get(), pin_stage_ids_, sizeof(int32_t) * T * K, cudaMemcpyHostToDevice, s));
    }
    if (part.n_device > 0 || part.staged_buf >= 0) {
      MT_CUDA_CHECK(cudaEventRecord(dev_begin_[l], s));
      dev_timed_[l] = true;
    }
    return part;
  }

  // The CPU computes its experts while the device runs the hot ones (queued before this
  // call), then their rows go into d (T*K, n_embd) at their slots.
  void finish_hybrid(uint32_t l, uint32_t T, const HybridPart& part, float* d) {
    CudaTiering& tier = *m_.tiering;
    cudaStream_t s = m_.stream;
    const uint32_t E = m_.hp.n_embd;
    if (dev_timed_[l]) MT_CUDA_CHECK(cudaEventRecord(dev_end_[l], s));
    if (part.jobs.empty()) return;
    const auto t0 = std::chrono::steady_clock::now();
    expert_outputs(m_.host->weights().layers[l], pin_h_, T, E, part.jobs, pin_rows_, m_.host->pool());
    tier.timing[l].cpu_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t n = part.jobs.size();
    std::copy(part.rows.begin(), part.rows.end(), pin_row_ids_);
    MT_CUDA_CHECK(cudaMemcpyAsync(rows_dev_.get(), pin_rows_, sizeof(float) * n * E, cudaMemcpyHostToDevice, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(row_ids_dev_.get(), pin_row_ids_, sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
    scatter_rows(d, rows_dev_.as<float>(), row_ids_dev_.as<int32_t>(), static_cast<int>(n), static_cast<int>(E), s);
  }

  // Prefill streaming: queues the bank of the first MoE layer after `after` (-1: the
  // first MoE layer) into the free staging buffer; staged_buf_ names it.
  void stage_next_layer(int64_t after) {
    for (uint32_t l = static_cast<uint32_t>(after + 1); l < m_.hp.n_layer; ++l) {
      if (!m_.w.layers[l].moe) continue;
      staged_buf_ = m_.tiering->cache->stage_layer(l);
      return;
    }
  }

  // Device time of this step's hybrid expert products per layer (events read after the
  // step's final synchronisation).
  void collect_device_times() {
    if (m_.tiering == nullptr) return;
    for (uint32_t l = 0; l < m_.hp.n_layer; ++l) {
      if (!dev_timed_[l]) continue;
      float ms = 0;
      MT_CUDA_CHECK(cudaEventElapsedTime(&ms, dev_begin_[l], dev_end_[l]));
      m_.tiering->timing[l].device_s += ms * 1e-3;
      dev_timed_[l] = false;
    }
  }

  // Pinned and device buffers of the hybrid step (tiered models only).
  void alloc_tiering_buffers() {
    const size_t K = m_.hp.n_expert_used, E = m_.hp.n_embd, S = kMmvqMaxTokens * K;
    auto pinned = [](size_t bytes) {
      void* p = nullptr;
      MT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
      return p;
    };
    pin_sel_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
    pin_slot_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
    pin_row_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
    pin_stage_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
    stage_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
    pin_h_ = static_cast<float*>(pinned(sizeof(float) * kMmvqMaxTokens * E));
    pin_rows_ = static_cast<float*>(pinned(sizeof(float) * S * E));
    slot_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
    row_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
    rows_dev_ = DeviceBuffer(sizeof(float) * S * E);
    dev_begin_.resize(m_.hp.n_layer);
    dev_end_.resize(m_.hp.n_layer);
    dev_timed_.assign(m_.hp.n_layer, false);
    for (uint32_t l = 0; l < m_.hp.n_layer; ++l) {
      MT_CUDA_CHECK(cudaEventCreate(&dev_begin_[l]));
      MT_CUDA_CHECK(cudaEventCreate(&dev_end_[l]));
    }
  }
  void free_tiering_buffers() {
    for (void* p : {static_cast<void*>(pin_sel_), static_cast<void*>(pin_slot_ids_), static_cast<void*>(pin_row_ids_),
                    static_cast<void*>(pin_stage_ids_),
                    static_cast<void*>(pin_h_), static_cast<void*>(pin_rows_)}) {
      if (p != nullptr) cudaFreeHost(p);
    }
    for (cudaEvent_t e : dev_begin_) cudaEventDestroy(e);
    for (cudaEvent_t e : dev_end_) cudaEventDestroy(e);
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
    collect_device_times();
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
    // Tiered: stream whole expert banks (prefill) or place each layer's experts (hybrid).
    const bool stream_step = m_.tiering != nullptr && m_.tiering->options.stream_threshold > 0 &&
                             T >= m_.tiering->options.stream_threshold;
    if (stream_step) stage_next_layer(-1);
    if (m_.tiering != nullptr && !stream_step) m_.tiering->scheduler->begin_step(T);
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
    const int Qw = arch.linear_attention ? 2 * Q : Q;  // attn_q rows (qwen3next / qwen35moe: query | gate per head)
    float* qkv = ws_->take_n<float>(T * (Qw + 2 * KVd));  // (T, attn_q rows + 2 kv_dim) projections
    float* qgate = Qw > Q ? ws_->take_n<float>(T * Q) : nullptr;  // (T, q_dim) the gates of gated attention
    float* qsplit = Qw > Q ? ws_->take_n<float>(T * Q) : nullptr; // (T, q_dim) their queries
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
          reader.n_in > 0 && T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(rt);
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
    auto attn_reader = [&](const DevLayer& L) -> const DeviceMatrix& {
      if (L.recurrent) return L.gdn_in.data ? L.gdn_in : L.ssm_qkv;
      return L.wqkv.data ? L.wqkv : L.wq;
    };
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
      if (L.recurrent) {  // Gated DeltaNet mixer into y, then the residual add with the FFN norm
        stage("gated delta net");
        gdn_layer(L, l, hx, T, y);
        stage("ffn norm");
        hx = norm(y, L.ffn_norm, ffn_reader(L));
      } else {
      // Attention: Q/K/V (one product when stacked), bias + q/k norm + RoPE + cache store
      // in one launch, attention, output; then the residual add fused with the FFN norm.
      stage("qkv");
      AttnPrepArgs pa;
      const int Ql = L.q_gated ? 2 * Q : Q;  // attn_q rows of this layer
      if (L.wqkv.data != nullptr) {
        mm(L.wqkv, hx, qkv);
        pa.q_src = qkv, pa.k_src = qkv + Ql, pa.v_src = qkv + Ql + KVd;
        pa.q_stride = pa.k_stride = pa.v_stride = Ql + 2 * KVd;
      } else {
        float* qr = qkv;                                   // (T, attn_q rows)
        float* kr = qkv + static_cast<size_t>(T) * Ql;     // (T, kv_dim)
        float* vr = kr + static_cast<size_t>(T) * KVd;     // (T, kv_dim)
        mm(L.wq, hx, qr);
        mm(L.wk, hx, kr);
        mm(L.wv, hx, vr);
        pa.q_src = qr, pa.k_src = kr, pa.v_src = vr;
        pa.q_stride = Ql, pa.k_stride = pa.v_stride = KVd;
      }
      if (L.q_gated) {  // per head [query | gate]: queries to qsplit, gates kept for the output
        split_gated_q(pa.q_src, pa.q_stride, Ti, static_cast<int>(hp.n_head), hd, qsplit, qgate, s);
        pa.q_src = qsplit;
        pa.q_stride = Q;
      }
      pa.bq = L.bq, pa.bk = L.bk, pa.bv = L.bv;
      if (arch.qk_norm == QkNorm::kPerHead || arch.qk_norm == QkNorm::kPerHeadOptional) {  // optional: null when absent
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
      if (static_cast<int64_t>(Ti) * aa.n_head <= kAttnDecodeCounters) {  // the decode merge in the partial launch
        aa.decode_counters = fused_attention_merge_ ? m_.decode_counters.as<uint32_t>() : nullptr;
      }
      {
        const size_t mark = ws_->mark();
        attention(aa, *ws_, s);
        ws_->rewind(mark);
      }
      if (L.q_gated) mul_sigmoid(att, qgate, static_cast<int64_t>(T) * Q, s);
      stage("wo");
      mm(L.wo, att, Ti, y);
      stage("ffn norm");
      hx = norm(y, L.ffn_norm, ffn_reader(L));
      }  // attention

      // FFN: routed experts (+ shared) or dense, into y (or, MoE, combined in the next norm).
      MoeCombineIn combine;
      if (L.moe) {
        const int ff = static_cast<int>(L.up_exps.n_out);
        stage("router");  // decode: the product and the top-k in one launch
        RouterFusedArgs ra;
        ra.x = h, ra.n_tokens = Ti, ra.K = K, ra.renormalize = arch.renormalize_topk;
        ra.logits = probs, ra.ids = sel, ra.weights = wts, ra.counter = m_.router_counter.as<uint32_t>();
        const bool plain = hp.gating == ExpertGating::kSoftmax && hp.expert_weights_scale == 1.0f && hp.n_expert_groups <= 1 &&
                           L.exp_probs_b == nullptr && hp.renormalize == arch.renormalize_topk;
        if (!plain) {  // sigmoid scores, a selection bias, expert groups or a scale (glm4moe)
          mm(L.router, h, Ti, probs);
          stage("router top-k");
          RouteMath rm;
          rm.sigmoid = hp.gating == ExpertGating::kSigmoid;
          rm.renormalize = hp.renormalize;
          rm.scale = hp.expert_weights_scale;
          rm.n_groups = static_cast<int>(hp.n_expert_groups), rm.n_group_used = static_cast<int>(hp.n_group_used);
          router_route(probs, Ti, X, K, rm, L.exp_probs_b, sel, wts, s);
        } else if (fused_router_ && T <= static_cast<uint32_t>(kMmvqMaxTokens) && router_fused_supports(L.router, ra)) {
          router_fused(L.router, ra, s);
        } else {
          mm(L.router, h, Ti, probs);
          stage("router top-k");
          router_topk(probs, Ti, X, K, arch.renormalize_topk, sel, wts, s);
        }
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
        // Where the experts' bytes are read: resident, or (tiered) this layer's cache slots
        // (hybrid: ids become slot ids, -1 for the CPU's) or its streamed bank (prefill).
        ExpertMats em{L.gate_exps, L.up_exps, L.down_exps, L.gate_up_exps};
        const int32_t* ids = sel;
        HybridPart cpu_part;
        if (m_.tiering != nullptr && stream_step) {
          const int buf = staged_buf_;
          m_.tiering->cache->wait_staged(buf, s);
          em = mats_of(m_.tiering->cache->staged(buf));
        } else if (m_.tiering != nullptr) {
          cpu_part = place_hybrid(l, T, sel, h, wts);
          em = mats_of(m_.tiering->cache->slots(l));
          ids = slot_ids_dev_.as<int32_t>();
        }
        // The grouped products run over one or two sets of expert matrices: the resident /
        // slot / streamed ones, and (stream mode) the staged misses; each set's ids leave
        // the other's rows alone (-1), so one SwiGLU serves both.
        struct ProductSet {
          ExpertMats m;
          const int32_t* ids;
        };
        ProductSet sets[2];
        int n_sets = 0;
        if (m_.tiering == nullptr || stream_step || cpu_part.n_device > 0) sets[n_sets++] = {em, ids};
        if (cpu_part.staged_buf >= 0) {
          m_.tiering->cache->wait_staged(cpu_part.staged_buf, s);
          sets[n_sets++] = {mats_of(m_.tiering->cache->staged(cpu_part.staged_buf)), stage_ids_dev_.as<int32_t>()};
        }
        stage("experts gate+up");
        ActRows act;  // (T*K, ff) the down projection's input
        act.x = u;
        act.rows = static_cast<int>(slots);
        if (n_sets > 0) {
          const ExpertMats& shape = sets[0].m;  // every set has the layer's types and shapes
          const QuantType dt = shape.down.type;
          const bool quant_down = T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(dt) &&
                                  swiglu_pairs_quant_supports(ff, act_quant_for(dt));
          if (shape.gate_up.data != nullptr) {
            for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.gate_up, sets[i].ids, K, hx, gu);
            if (quant_down) {
              act.quantized = true;
              act.mode = act_quant_for(dt);
              act.qs = uq;
              act.meta = um;
              swiglu_pairs_quant(gu, slots, ff, u, act.mode, uq, um, s);
            } else {
              swiglu_pairs(gu, slots, ff, u, s);
            }
          } else {
            for (int i = 0; i < n_sets; ++i) {
              if (sets[i].m.gate.data) mm_experts(sets[i].m.gate, sets[i].ids, K, hx, gu);
              mm_experts(sets[i].m.up, sets[i].ids, K, hx, u);
            }
            swiglu(shape.gate.data ? gu : nullptr, u, slots * ff, s);
          }
          stage("experts down");
          for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.down, sets[i].ids, K, act, d, /*per_slot=*/true);
        }
        if (cpu_part.staged_buf >= 0) m_.tiering->cache->release_staged(cpu_part.staged_buf, s);
        if (m_.tiering != nullptr && stream_step) {
          m_.tiering->cache->release_staged(staged_buf_, s);
          stage_next_layer(l);
        } else if (m_.tiering != nullptr) {
          finish_hybrid(l, T, cpu_part, d);
        }
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
      // The last st.rows rows of h, kLogitRows at a time into one (kLogitRows, n_vocab)
      // buffer, each piece copied to the host before the next product overwrites it (the
      // stream orders them). All rows: hx, with its quantized rows when it has them.
      const size_t V = hp.n_vocab;
      const uint32_t first = T - st.rows;
      float* lg = ws_->take_n<float>(std::min(st.rows, kLogitRows) * V);  // (<= kLogitRows, n_vocab)
      for (uint32_t r0 = 0; r0 < st.rows; r0 += kLogitRows) {
        const uint32_t n = std::min(kLogitRows, st.rows - r0);
        ActRows piece;
        piece.x = h + static_cast<size_t>(first + r0) * E;
        piece.rows = static_cast<int>(n);
        if (first == 0 && hx.quantized) {
          piece.quantized = true;
          piece.mode = hx.mode;
          piece.qs = hx.qs + static_cast<size_t>(r0) * E;
          piece.meta = hx.meta + static_cast<size_t>(r0) * (E / 32);
        }
        mm(W.output, piece, lg);
        MT_CUDA_CHECK(cudaMemcpyAsync(st.host_logits + r0 * V, lg, n * V * sizeof(float), cudaMemcpyDeviceToHost, s));
      }
    }
    stage("end");
  }

  // The Gated DeltaNet mixer of layer l (model/gated_delta_net.cpp) on hx's T rows into y
  // (T, n_embd): the input projections (one product when stacked: rows qkv | z | b | a),
  // the conv over the sequence's window, the gates, the delta rule on its state, the
  // z-gated norm, ssm_out. Scratch from the workspace (workspace_bytes' gdn_floats).
  void gdn_layer(const DevLayer& L, uint32_t l, const ActRows& hx, uint32_t T, float* y) {
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
    gdn_conv(pq, stride_q, L.ssm_conv1d, conv_[l].as<float>(), u, Ti, C, static_cast<int>(hp.ssm_conv), s);
    gdn_gates(pb, pa, stride_ba, L.ssm_a, L.ssm_dt, Ti, nv, nk, grouped, beta, g, s);
    DeltaRuleArgs da;
    da.u = u, da.conv_dim = C, da.key_dim = static_cast<int>(hp.ssm_key_dim());
    da.nk = nk, da.nv = nv, da.dk = dk, da.tiled = hp.ssm_tiled;
    da.g = g, da.beta = beta, da.state = delta_[l].as<float>(), da.out = o, da.T = Ti, da.eps = hp.rms_eps;
    delta_rule(da, s);
    gated_rms_norm(o, pz, stride_z, L.ssm_norm, Ti, nv, dk, hp.rms_eps, s);
    mm(L.ssm_out, o, Ti, y);
    ws_->rewind(mark);
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
  std::vector<DeviceBuffer> k_, v_;  // per layer (n_ctx, kv_dim) rows of kv_type (none: recurrent layers)
  std::vector<DeviceBuffer> conv_, delta_;  // per recurrent layer: conv window, delta-rule state (f32)
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
  // Tiered models (cuda/tiering.h): the hybrid step's buffers, (kMmvqMaxTokens * K) slots.
  int32_t *pin_sel_ = nullptr, *pin_slot_ids_ = nullptr, *pin_row_ids_ = nullptr, *pin_stage_ids_ = nullptr;
  float *pin_h_ = nullptr, *pin_rows_ = nullptr;  // (T, n_embd) normed rows; (S, n_embd) CPU rows
  DeviceBuffer slot_ids_dev_, row_ids_dev_, rows_dev_, stage_ids_dev_;
  std::vector<uint32_t> staged_;                  // stream mode: this layer-step's staged experts
  std::vector<bool> staged_of_;                   // (n_expert)
  std::vector<ExpertTask> tasks_;
  std::vector<Placement> placed_;
  std::vector<int32_t> slot_of_;                  // (n_expert) this step's slot, -1: CPU
  std::vector<cudaEvent_t> dev_begin_, dev_end_;  // (n_layer) hybrid device products
  std::vector<bool> dev_timed_;
  int staged_buf_ = -1;                           // prefill streaming: the buffer of the next MoE layer
  bool fused_router_ = false;           // MOETIER_CUDA_FUSED_ROUTER=1: router product and top-k in one launch
  bool fused_attention_merge_ = false;  // MOETIER_CUDA_FUSED_ATTN=1: decode attention merge in the partials
};

}  // namespace

CudaModel::CudaModel(const Model& m, std::unique_ptr<Impl> impl) : model_(m), impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

uint64_t CudaModel::weight_bytes() const { return impl_->w.bytes(); }

void CudaModel::set_tiering(CudaTiering* tiering) { impl_->tiering = tiering; }

StatusOr<std::unique_ptr<CudaModel>> CudaModel::load(const Model& model, const CudaOptions& options) {
  // The device kernels implement softmax routing with optional renormalisation and the
  // sigmoid-gated shared expert; anything else stays on the CPU until they learn it.
  const HParams& hp = model.hparams();
  const ArchInfo& info = arch_info(hp.arch);
  if (hp.gating == ExpertGating::kSoftmaxOfSelected || hp.mla || info.oai || hp.yarn_ext != 0.0f ||
      hp.rope_attn_factor != 1.0f || !hp.n_head_per_layer.empty() || hp.n_expert > 512 ||
      (hp.n_expert_groups > 1 && hp.n_expert_groups > 64)) {
    return unimplemented(std::string(info.name) +
                         " on the CUDA backend is not implemented yet (latent attention, sinks / sliding windows, per-layer "
                         "heads, YaRN, more than 512 experts or 64 expert groups): run it with "
                         "--device cpu");
  }
  if (info.linear_attention && !gdn_supports(static_cast<int>(hp.ssm_state), static_cast<int>(hp.ssm_conv))) {
    return unimplemented(std::string(info.name) + ": Gated DeltaNet state size " + std::to_string(hp.ssm_state) + " / conv " +
                         std::to_string(hp.ssm_conv) + " has no CUDA kernel (64 or 128, conv 2..8): run it with --device cpu");
  }
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(options.device));
  const ModelWeights& w = model.weights();
  MT_RETURN_IF_ERROR(check_tensor(w.token_embd));
  MT_RETURN_IF_ERROR(check_tensor(w.output));
  for (const LayerWeights& lw : w.layers) {
    for (const Tensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.router, &lw.shexp_gate, &lw.shexp_up, &lw.shexp_down,
                            &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down, &lw.ssm_qkv, &lw.ssm_z, &lw.ssm_ba, &lw.ssm_beta,
                            &lw.ssm_alpha, &lw.ssm_out}) {
      MT_RETURN_IF_ERROR(check_tensor(*t));
    }
    for (const Tensor* t : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      if (!t->present()) continue;
      // Tiered experts are copied from the file's bytes (the host copy may be interleaved).
      if (!supports(t->type)) return unimplemented(t->name + ": no CUDA kernels for type " + std::string(type_name(t->type)));
      if (!options.experts_on_host) MT_RETURN_IF_ERROR(check_tensor(*t));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  impl->hp = model.hparams();
  impl->arch = &arch_info(model.hparams().arch);
  impl->host = &model;
  impl->experts_on_host = options.experts_on_host;
  MT_CUDA_CHECK(cudaSetDevice(options.device));
  const uint64_t need = DeviceWeights::bytes_needed(model, options.experts_on_host);
  if (need > mem.free) {
    return out_of_range("the weights need " + std::to_string(need) + " bytes of device memory, " + mem.name + " has " +
                        std::to_string(mem.free) + " free");
  }
  impl->w.upload(model, options.experts_on_host);
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  impl->router_counter = DeviceBuffer(sizeof(uint32_t));
  impl->decode_counters = DeviceBuffer(sizeof(uint32_t) * kAttnDecodeCounters);
  MT_CUDA_CHECK(cudaMemsetAsync(impl->router_counter.get(), 0, impl->router_counter.bytes(), impl->stream));
  MT_CUDA_CHECK(cudaMemsetAsync(impl->decode_counters.get(), 0, impl->decode_counters.bytes(), impl->stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(impl->stream));
  return std::unique_ptr<CudaModel>(new CudaModel(model, std::move(impl)));
}

StatusOr<std::unique_ptr<Evaluator>> CudaModel::new_sequence(uint32_t n_ctx, QuantType kv_type) {
  if (n_ctx == 0) return invalid_argument("context size must be positive");
  if (impl_->experts_on_host && impl_->tiering == nullptr) {
    return invalid_argument("the experts of this model are in host memory: set_tiering() before new_sequence()");
  }
  if (kv_type != QuantType::F16 && kv_type != QuantType::Q8_0 && kv_type != QuantType::F32) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " is not f16, q8_0 or f32");
  }
  const uint64_t block = type_traits(kv_type).block_elems;
  if (block > 1 && impl_->hp.head_dim % block != 0) {
    return invalid_argument(std::string("KV cache type ") + type_name(kv_type) + " needs a head size that is a multiple of " +
                            std::to_string(block));
  }
  MT_CUDA_CHECK(cudaSetDevice(impl_->device));
  const HParams& hp = impl_->hp;
  const uint64_t kv_bytes = 2ull * hp.n_attention_layers() * *row_bytes(kv_type, hp.kv_dim()) * n_ctx +
                            4ull * (hp.n_layer - hp.n_attention_layers()) * (hp.conv_state_floats() + hp.delta_state_floats());
  MT_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(impl_->device));
  if (kv_bytes > mem.free) {
    return out_of_range("the KV cache for " + std::to_string(n_ctx) + " tokens at " + type_name(kv_type) + " needs " +
                        std::to_string(kv_bytes) + " bytes of device memory, " + std::to_string(mem.free) + " are free");
  }
  return std::unique_ptr<Evaluator>(new CudaSequence(*impl_, n_ctx, kv_type));
}

}  // namespace mt::cuda
