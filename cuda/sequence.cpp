// CudaSequence: the feed loop, the step workspace and the decode graph (see sequence.h).
#include "cuda/sequence.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/log.h"
#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

CudaSequence::CudaSequence(CudaModel::Impl& m, uint32_t n_ctx, QuantType kv_type)
    : m_(m), n_ctx_(n_ctx), kv_type_(kv_type), kv_row_bytes_(*row_bytes(kv_type, m.hp.kv_dim())) {
  for (uint32_t l = 0; l < m.hp.n_layer; ++l) {
    const bool recurrent = m.hp.is_recurrent(l);  // Gated DeltaNet: states, no rows
    k_.emplace_back(recurrent ? 0 : kv_row_bytes_ * n_ctx);
    v_.emplace_back(recurrent || m.hp.mla ? 0 : kv_row_bytes_ * n_ctx);  // MLA: one latent row, read as K and V
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
  if (m.tiering != nullptr) graphs_ = false;  // a hybrid step waits for its routing on the host
  // Decode attention by the warps kernel up to 4096 positions (see sequence_attention.cpp);
  // MOETIER_CUDA_ATTN_WARP_MAX=n moves the top (0: the grouped kernel always).
  if (const char* wm = std::getenv("MOETIER_CUDA_ATTN_WARP_MAX"); wm != nullptr) {
    warp_attention_max_ = static_cast<uint32_t>(std::max(0, std::atoi(wm)));
  }
  if (const char* ub = std::getenv("MOETIER_CUDA_UBATCH"); ub != nullptr && std::atoi(ub) > 0) {
    micro_batch_ = static_cast<uint32_t>(std::atoi(ub));
  }
  // MLA: the per-head ids of the largest micro-batch, once (a captured graph reads them).
  if (m.hp.mla) build_mla_ids(std::max({micro_batch_, CudaModel::kStreamMicroBatch, static_cast<uint32_t>(kMmvqMaxTokens)}));
}

CudaSequence::~CudaSequence() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (pinned_step_ != nullptr) cudaFreeHost(pinned_step_);
  if (pinned_logits_ != nullptr) cudaFreeHost(pinned_logits_);
}

Status CudaSequence::feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) {
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
    // One decode token (untraced): a graph replay.
    const bool one = n == 1 && rows == 1;
    const bool done = one && trace == nullptr &&
                      eval_token_graph(tokens[c0], logits);
    if (!done) {
      eval_chunk(tokens.subspan(c0, n), rows, logits, trace);
    }
    pos_ += n;
  }
  return {};
}

size_t CudaSequence::workspace_bytes(uint32_t T) const {
  const HParams& hp = m_.hp;
  const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), K = std::max(1u, hp.n_expert_used);
  const size_t n_ff = std::max({hp.n_ff_exp, hp.n_ff, hp.n_ff_shexp, 1u});
  const size_t floats = 4 * T * E + 2 * T * Q + 2 * T * KV + T * (Q + 2 * KV) + T * std::max(1u, hp.n_expert) +
                        2 * T * K + 3 * T * K * n_ff + T * K * E + 3 * T * n_ff +
                        static_cast<size_t>(std::min(T, kLogitRows)) * hp.n_vocab +  // the logits piece
                        T * E + T * K * n_ff +  // h's and u's quants and scales
                        T * Q / 2 + 2;          // the attention output's (T*Q bytes + T*Q/4)
  const size_t C = hp.ssm_conv_dim(), Vd = hp.ssm_value_dim(), nv = hp.ssm_nv;
  const size_t gdn_floats = hp.recurrent.empty() ? 0 : T * (2 * C + 2 * Vd + 6 * nv + 3 * Q);  // see gdn_layer
  const size_t gate_floats = hp.arch == Arch::kLaguna ? T * Q : 0;  // attention_layer's output gate
  const size_t bytes = (floats + gdn_floats + gate_floats) * sizeof(float) + 64 * 256;
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
  return bytes + scratch + mla_workspace_bytes(T);
}

void CudaSequence::ensure_workspace(uint32_t T) {
  if (T > ws_tokens_) {
    // A captured decode graph reads the old workspace's addresses: it is captured again.
    if (exec_ != nullptr) {
      MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
      MT_CUDA_CHECK(cudaGraphExecDestroy(exec_));
      exec_ = nullptr;
      graph_cap_ = 0;
    }
    ws_.reset();
    ws_ = std::make_unique<Workspace>(workspace_bytes(std::max(T, 8u)));
    ws_tokens_ = std::max(T, 8u);
  }
}

// A micro-batch on the stream, synchronously.
void CudaSequence::eval_chunk(std::span<const int32_t> tokens, uint32_t rows, std::vector<float>* logits, Trace* trace) {
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
bool CudaSequence::eval_token_graph(int32_t token, std::vector<float>* logits) {
  if (!graphs_) return false;
  const uint32_t cap = graph_cap();
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

}  // namespace mt::cuda::detail
