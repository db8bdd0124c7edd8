// Internal to cuda/: the model's device state (CudaModel::Impl) and one sequence
// (CudaSequence). Its state is split by concern: the KV cache (cuda/device_kv_cache.h),
// the step workspace (cuda/step_workspace.h), the decode graph (cuda/decode_graph.h), its
// switches (SequenceOptions). Its forward pass is split by what it computes: the feed
// loop, fork and truncate (sequence.cpp); the step's layers (sequence_step.cpp:
// embedding, attention, MoE / dense FFN, output); the Gated DeltaNet mixer
// (sequence_gdn.cpp); latent attention (sequence_mla.cpp); the tiered MoE layers'
// hybrid layer-step through the tiered-expert executor and prefill streaming
// (sequence_tiering.cpp). Every launch goes on the model's one stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/batch_graph.h"
#include "cuda/cuda_model.h"
#include "cuda/decode_graph.h"
#include "cuda/device_kv_cache.h"
#include "cuda/device_weights.h"
#include "cuda/expert_cache.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/stage_timer.h"
#include "cuda/routing_replay_stage.h"
#include "cuda/step_workspace.h"
#include "cuda/tiering.h"
#include "cuda/tiering_device.h"
#include "model/layers.h"

namespace mt::cuda {

struct CudaModel::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  HParams hp;
  const ArchInfo* arch = nullptr;
  DeviceWeights w;
  // (kAttnDecodeCounters) AttentionArgs quant_counters: zero between launches (each launch
  // leaves them zero).
  DeviceBuffer attn_quant_counters;
  bool experts_on_host = false;      // CudaOptions::experts_on_host
  CudaTiering* tiering = nullptr;    // set_tiering(); required when experts_on_host
  RoutingReplayStage routing_replay;  // a Trace's routing_override() rows (cuda/routing_replay_stage.h)
  // The step workspace every sequence's passes take their buffers from (a model's passes
  // run one at a time on its one stream, each ending in a wait): one allocation for the
  // largest pass, however many sequences there are.
  StepWorkspace ws;
  // Batched decode graphs (cuda/batch_graph.h), made at the first eligible batch.
  std::unique_ptr<BatchGraphs> batch_graphs;

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace detail {

// A sequence's switches, read once from the environment (tuning and benchmarks):
// MOETIER_CUDA_GRAPHS=0 launches decode steps plainly; MOETIER_CUDA_UBATCH=n sets the
// prefill micro-batch; MOETIER_CUDA_ATTN_WARP_MAX=n the longest context decode attention
// runs by the warps kernel (0: never; sequence_attention.cpp).
struct SequenceOptions {
  bool graphs = true;
  uint32_t micro_batch = CudaModel::kMicroBatch;
  // The warps kernel in its lanes form measured faster than the grouped kernel at every
  // length measured, 8 to 4096 positions (AttentionArgs warp_max, warp_lanes).
  uint32_t warp_attention_max = 4096;
  static SequenceOptions from_env();
};

// One sequence: its device KV cache, step workspace and decode graph, and the forward
// pass over them.
class CudaSequence;

// One sequence's rows in a pass: rows [first, first + n) are its tokens at positions
// pos .. pos + n - 1 (a pass may hold several sequences' rows: a batch of sequences).
struct SeqRows {
  CudaSequence* seq = nullptr;
  uint32_t first = 0, n = 0, pos = 0;
};

// One sequence's tokens of a batch (cuda/sequence_batch.cpp): `want` flags the rows whose
// logits are asked (empty: none).
struct SeqFeed {
  CudaSequence* seq = nullptr;
  std::span<const int32_t> tokens;
  std::span<const uint8_t> want;
};

class CudaSequence final : public Evaluator {
 public:
  CudaSequence(CudaModel::Impl& m, uint32_t n_ctx, QuantType kv_type);
  ~CudaSequence() override;
  CudaSequence(const CudaSequence&) = delete;
  CudaSequence& operator=(const CudaSequence&) = delete;

  uint32_t position() const override { return pos_; }
  uint32_t n_ctx() const override { return n_ctx_; }
  Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) override;
  // A verification's 2..BatchGraphs::kMaxTokens rows through a batch graph, each reduced
  // to its argmax on the device (BatchGraphs::replay_argmax); anything else as Evaluator's.
  Status feed_argmax(std::span<const int32_t> tokens, bool all_logits, std::vector<int32_t>* ids,
                     Trace* trace) override;

  // This sequence becomes a copy of `from` (a sequence of the same model and KV type):
  // its first from.position() positions' K / V rows (recurrent layers: their states)
  // copied on the device, its position set to from's. Errors: another model or KV type,
  // from's position beyond this context.
  Status fork_from(const CudaSequence& from);
  // The position set back to n <= position() (the rows past it are overwritten by the
  // next tokens). A recurrent model's states hold only the last position: it refuses any n
  // but position(), 0 (the states zeroed) and, with keep_run_rollback, a position inside
  // its last logged run (rollback_run).
  Status truncate(uint32_t n);
  // Runs of 2 to max_run tokens logged so that truncate can go back into the last one
  // (DeviceKvCache::RunLog; a recurrent model only, else nothing); 0: off.
  void keep_run_rollback(uint32_t max_run);
  bool belongs_to(const CudaModel::Impl& m) const { return &m == &m_; }

  // Several sequences' tokens evaluated together (cuda/sequence_batch.cpp): every pass of
  // up to a micro-batch of rows holds rows of several sequences, so each product and each
  // expert's weights are read once per pass for all of them; attention runs per sequence
  // over its own cache. The asked rows' logits are appended to `logits` in feed order.
  // Errors (nothing evaluated): sequences of another model or given twice, a token outside
  // the vocabulary, a context overflow.
  static Status feed_batch(CudaModel::Impl& m, std::span<const SeqFeed> feeds, std::vector<float>* logits, Trace* trace);
  // The pass's (n_layer, T) KV table: row t of layer l = its sequence's cache of l and the
  // positions it sees (attention layers only; the others' entries left as they are).
  static void fill_kv_rows(const CudaModel::Impl& m, std::span<const SeqRows> seqs, uint32_t T, SeqKvRow* out);

 private:
  static constexpr uint32_t kGraphSpan = 256;  // positions one decode graph serves

  struct Step {
    const int32_t* host_ids = nullptr;  // (T) ids; null: a graph step (id and position from graph_'s step_dev)
    uint32_t T = 0, rows = 0;           // tokens, logits rows wanted (the last `rows`, or out_rows)
    float* host_logits = nullptr;       // (rows, n_vocab)
    int32_t* host_argmax = nullptr;     // (rows) pinned: each row's argmax too (a decode graph's capture)
    Trace* trace = nullptr;
    uint32_t graph_n_kv_cap = 0;        // graph step: positions its attention split covers
    std::span<const SeqRows> seqs;      // the sequences whose rows the pass holds, in row order
    std::span<const uint32_t> out_rows; // (rows) ascending rows whose logits are wanted; empty: the last `rows`
    // A batch graph's capture (cuda/batch_graph.h): host_ids is pinned, the KV table is
    // copied from pinned_kv_rows (filled before each replay), the attention split covers
    // batch_n_kv_cap positions, and the logits rows stay on the device (*logits_dev).
    const SeqKvRow* pinned_kv_rows = nullptr;
    uint32_t batch_n_kv_cap = 0;
    const float** logits_dev = nullptr;
  };
  // The micro-batch being enqueued: its step, sizes and buffers (shapes beside them; taken
  // from the workspace by take_step_buffers).
  struct Pass {
    const Step* st = nullptr;
    uint32_t T = 0;
    int Ti = 0;
    bool graph = false;        // a captured decode step (position read from pos_dev)
    bool stream_step = false;  // tiered prefill: expert banks streamed
    const uint32_t* pos_dev = nullptr;  // graph step: (1) position
    float* x = nullptr;        // (T, n_embd) residual stream
    float* h = nullptr;        // (T, n_embd) normed
    float* qkv = nullptr;      // (T, attn_q rows + 2 kv_dim) projections
    float* qgate = nullptr;    // (T, q_dim) the gates of gated attention (qwen3next / qwen35moe)
    float* qsplit = nullptr;   // (T, q_dim) their queries
    float* q = nullptr;        // (T, q_dim) roped queries
    float* att = nullptr;      // (T, q_dim) attention output
    float* y = nullptr;        // (T, n_embd) sub-block output
    float* probs = nullptr;    // (T, n_expert) router logits
    int32_t* sel = nullptr;    // (T, K) selected experts
    float* wts = nullptr;      // (T, K) their weights
    float* gu = nullptr;       // (T*K, 2 n_ff) gate | up rows
    float* u = nullptr;        // (T*K, n_ff) activated rows
    float* d = nullptr;        // (T*K, n_embd) down rows
    float* gus = nullptr;      // (T, 2 n_ff) shared / dense gate | up
    float* us = nullptr;       // (T, n_ff)
    float* ds = nullptr;       // (T, n_embd) shared down
    int8_t* hq = nullptr;      // (T, n_embd) h quantized for its next reader
    uint2* hm = nullptr;       // (T, n_embd / 32) their scales and sums
    int8_t* uq = nullptr;      // (T*K, n_ff) u quantized for the down product
    uint2* um = nullptr;       // (T*K, n_ff / 32)
    int8_t* aq = nullptr;      // (T, q_dim) the attention's output quantized for wo (AttentionArgs quant_qs)
    uint2* am = nullptr;       // (T, q_dim / 32)
    std::vector<int32_t> host_sel;  // a trace's copies of the routing
    std::vector<float> host_wts;
    const int32_t* out_rows_dev = nullptr;  // (st->rows) st->out_rows on the device (gathered logits)
    // Several sequences of one KV type: (n_layer, T) each row's cache and positions seen per
    // attention layer (multi_kv_rows), so RoPE + cache stores and decode attention take one
    // launch for all of them; null: per sequence.
    const SeqKvRow* kv_rows_dev = nullptr;

    // The position of row t (the sequence holding it).
    uint32_t pos_of(uint32_t t) const {
      for (const SeqRows& r : st->seqs) {
        if (t >= r.first && t < r.first + r.n) return r.pos + (t - r.first);
      }
      return 0;
    }
  };

  // sequence.cpp
  void ensure_workspace(uint32_t T);
  WorkspaceShape workspace_shape() const { return {&m_.hp, &m_.w, m_.experts_on_host, n_ctx_}; }
  // Largest pass of rows one feed evaluates at a time: the micro-batch (tiered: streamed
  // prefill's, or a hybrid step's kHybridMaxTokens below the streaming threshold).
  uint32_t micro_batch(uint32_t T) const;
  // One pass of several sequences' rows (feed_batch), on the stream, synchronously.
  void eval_pass(const Step& step);
  // feed_batch through a batch graph (cuda/batch_graph.h) where the batch is one decode
  // token per sequence and the model allows it; false: nothing done (launch plainly).
  // With ids (then logits may be null) each row's argmax instead of its logits.
  static bool eval_batch_graph(CudaModel::Impl& m, std::span<const SeqFeed> feeds, std::vector<float>* logits,
                               Trace* trace, std::vector<int32_t>* ids = nullptr);
  void eval_chunk(std::span<const int32_t> tokens, uint32_t rows, std::vector<float>* logits, Trace* trace);
  // With ids (logits then may be null): the row's argmax alone, reduced in the graph.
  bool eval_token_graph(int32_t token, std::vector<float>* logits, std::vector<int32_t>* ids = nullptr);
  // 2..BatchGraphs::kMaxTokens tokens of this sequence with every row's logits through a
  // batch graph (one row per token); false: nothing done.
  bool eval_rows_graph(std::span<const int32_t> tokens, std::vector<float>* logits, std::vector<int32_t>* ids = nullptr);
  // The tokens against the context and the vocabulary (nothing evaluated on an error).
  Status check_tokens(std::span<const int32_t> tokens) const;
  // The last position (+ 1) of the span of kGraphSpan positions a decode graph at pos_ serves.
  uint32_t graph_cap() const { return std::min(n_ctx_, (pos_ / kGraphSpan + 1) * kGraphSpan); }

  // sequence_step.cpp
  void enqueue(const Step& st);
  void take_step_buffers(Pass& p);
  void stage(const Pass& p, const char* name) { (p.graph ? graph_.timer() : timer_).mark(name, m_.stream); }
  ActRows add_norm(Pass& p, const float* add_y, const float* w, const DeviceMatrix& reader,
                   const MoeCombineIn* combine = nullptr);
  void attention_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx);
  void multi_kv_rows(Pass& p);  // p.kv_rows_dev for a pass of several sequences (sequence_attention.cpp)
  // attention_layer's RoPE + cache stores and attention over the pass's sequences: one
  // launch pair per sequence, or with p.kv_rows_dev one prep launch and one attention
  // launch per stretch of decode tokens. True when every launch also quantized wo's rows.
  bool attend_sequences(Pass& p, uint32_t l, const AttnPrepArgs& pa, const AttentionArgs& aa, bool quant_wo);
  void qkv_products(Pass& p, const DevLayer& L, const HParams& hp, const ActRows& hx, AttnPrepArgs& pa);
  void moe_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, MoeCombineIn& combine);
  void output_logits(Pass& p, const ActRows& hx);
  void gathered_logits(Pass& p);  // st->out_rows' rows of h
  void ffn_dense(const DeviceMatrix& gate_up, const DeviceMatrix& gate, const DeviceMatrix& up,
                 const DeviceMatrix& down, const ActRows& h, float* gu, float* act, float* out);

  // sequence_gdn.cpp: the mixer of every sequence's rows of the pass into y (a logged run's
  // states and inputs kept: DeviceKvCache::RunLog).
  void gdn_layer(const Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, float* y);
  // The recurrent states as after the first `keep` tokens of the last logged run: each
  // layer's conv window from the logged rows, its delta state from before the run and the
  // kept tokens' delta rule again (the kernel the run itself used). On m_.stream.
  void rollback_run(uint32_t keep);

  // sequence_mla.cpp: the latent attention layer into p.y (its grouped per-head products
  // read the KV cache's head id table; its buffers: step_workspace.h mla_workspace_bytes).
  void mla_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx);

  // Matrix product whose scratch is given back as soon as it is launched.
  void mm(const DeviceMatrix& w, const float* x, int n, float* y) {
    const size_t mark = ws_->mark();
    matmul(w, 0, x, n, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  void mm_experts(const DeviceMatrix& w, const int32_t* ids, int n, int K, const float* x, bool per_slot, float* y) {
    const size_t mark = ws_->mark();
    matmul_experts(w, {ids, n, K, per_slot}, x, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  // The same over rows that may be quantized already (cuda/kernels/matmul.h ActRows).
  void mm(const DeviceMatrix& w, const ActRows& x, float* y) {
    const size_t mark = ws_->mark();
    matmul(w, x, y, *ws_, m_.stream);
    ws_->rewind(mark);
  }
  void mm_experts(const DeviceMatrix& w, const int32_t* ids, int K, const ActRows& x, float* y, bool per_slot = false,
                  const int32_t* groups = nullptr) {
    const size_t mark = ws_->mark();
    matmul_experts(w, ids, K, x, per_slot, y, *ws_, m_.stream, groups);
    ws_->rewind(mark);
  }

  // ---- tiered MoE layers (cuda/tiering.h; sequence_tiering.cpp, sequence_moe.cpp)

  // The grouped expert products of a MoE layer over one or two sets of expert matrices
  // (resident, cache slots, a streamed bank, staged misses) into p.d; each set's ids
  // leave the other's rows alone (-1), so one SwiGLU serves both. No set: nothing.
  void expert_products(Pass& p, const DevLayer& L, const ActRows& hx, std::span<const ProductSet> sets);
  // A hybrid layer-step through the tiered-expert executor (cuda/tiering_device.h).
  void hybrid_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx);
  void stage_next_layer(int64_t after);
  void collect_device_times();

  CudaModel::Impl& m_;
  uint32_t n_ctx_, pos_ = 0;
  SequenceOptions opt_;
  DeviceKvCache kv_;
  StepWorkspace& ws_;  // the model's (m_.ws)
  DecodeGraph graph_;
  uint64_t graph_ws_generation_ = 0;  // the workspace the decode graph was captured over
  StageTimer timer_;  // MOETIER_CUDA_PROFILE=1: the plain launches' stage times
  int staged_buf_ = -1;  // tiered prefill streaming: the buffer of the next MoE layer
};

}  // namespace detail
}  // namespace mt::cuda
