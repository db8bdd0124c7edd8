// Internal to cuda/: the model's device state (CudaModel::Impl) and one sequence
// (CudaSequence), whose forward pass is split by what it computes: the feed loop, the
// workspace and the decode graph (sequence.cpp); the step's layers (sequence_step.cpp:
// embedding, attention, MoE / dense FFN, output); the Gated DeltaNet mixer
// (sequence_gdn.cpp); latent attention (sequence_mla.cpp); the tiered MoE layers'
// hybrid placement and prefill streaming (sequence_tiering.cpp); a hybrid decode step as
// segment graphs (sequence_segments.cpp). Every launch goes on
// the model's one stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/device_weights.h"
#include "cuda/expert_cache.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/stage_timer.h"
#include "cuda/tiering.h"
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
  const Model* host = nullptr;       // the host model (its CPU experts and thread pool)
  bool experts_on_host = false;      // CudaOptions::experts_on_host
  CudaTiering* tiering = nullptr;    // set_tiering(); required when experts_on_host

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace detail {

// One sequence: the device KV cache (or, MLA, latent rows; recurrent layers: states) and
// the step buffers.
class CudaSequence final : public Evaluator {
 public:
  CudaSequence(CudaModel::Impl& m, uint32_t n_ctx, QuantType kv_type);
  ~CudaSequence() override;
  CudaSequence(const CudaSequence&) = delete;
  CudaSequence& operator=(const CudaSequence&) = delete;

  uint32_t position() const override { return pos_; }
  uint32_t n_ctx() const override { return n_ctx_; }
  Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) override;

 private:
  static constexpr uint32_t kGraphSpan = 256;  // positions one decode graph serves
  static constexpr uint32_t kLogitRows = 256;  // logits rows per output product (one (kLogitRows, n_vocab) buffer)

  struct Step {
    const int32_t* host_ids = nullptr;  // (T) ids; null: a graph step (id and position from pinned_step_)
    uint32_t T = 0, rows = 0;           // tokens, logits rows wanted (the last `rows`)
    float* host_logits = nullptr;       // (rows, n_vocab)
    Trace* trace = nullptr;
    uint32_t graph_n_kv_cap = 0;        // graph step: positions its attention split covers
  };
  // The micro-batch being enqueued: its step, sizes and buffers (shapes beside them; taken
  // from the workspace by take_step_buffers).
  struct Pass {
    const Step* st = nullptr;
    uint32_t T = 0;
    int Ti = 0;
    bool graph = false;        // a captured decode step (position read from pos_dev)
    bool stream_step = false;  // tiered prefill: expert banks streamed
    bool hgraph = false;       // a hybrid decode step run as segment graphs (segment_begin)
    bool replay = false;       // hgraph: a segment's graph was launched; its launches are skipped
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
  };

  // sequence.cpp
  size_t workspace_bytes(uint32_t T) const;
  void ensure_workspace(uint32_t T);
  void eval_chunk(std::span<const int32_t> tokens, uint32_t rows, std::vector<float>* logits, Trace* trace);
  bool eval_token_graph(int32_t token, std::vector<float>* logits);
  // The last position (+ 1) of the span of kGraphSpan positions a decode graph at pos_ serves.
  uint32_t graph_cap() const { return std::min(n_ctx_, (pos_ / kGraphSpan + 1) * kGraphSpan); }

  // sequence_step.cpp
  void enqueue(const Step& st);
  void take_step_buffers(Pass& p);
  void stage(const Pass& p, const char* name) { (p.graph ? graph_timer_ : timer_).mark(name, m_.stream); }
  ActRows add_norm(Pass& p, const float* add_y, const float* w, const DeviceMatrix& reader,
                   const MoeCombineIn* combine = nullptr);
  void attention_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx);
  void moe_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, MoeCombineIn& combine);
  void output_logits(Pass& p, const ActRows& hx);
  void ffn_dense(const DeviceMatrix& gate_up, const DeviceMatrix& gate, const DeviceMatrix& up,
                 const DeviceMatrix& down, const ActRows& h, float* gu, float* act, float* out);

  // sequence_gdn.cpp
  void gdn_layer(const DevLayer& L, uint32_t l, const ActRows& hx, uint32_t T, float* y);

  // sequence_mla.cpp: the latent attention layer into p.y; the (tokens, n_head) table of
  // per-head "expert" ids its grouped products read; the workspace its buffers take.
  void mla_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx);
  void build_mla_ids(uint32_t tokens);
  size_t mla_workspace_bytes(uint32_t T) const;

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
  // The same over rows that may be quantized already (cuda/kernels/matmul.h ActRows).
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

  // ---- tiered MoE layers (cuda/tiering.h; sequence_tiering.cpp)

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
    int staged_buf = -1;    // the staging buffer of this step's refused misses (stream, split)
  };
  HybridPart place_hybrid(Pass& p, uint32_t l, uint32_t T, const int32_t* sel, const float* h, const float* wts);
  // Queues the CPU rows' copy and scatter into d; computes them now, or (hybrid_ahead())
  // leaves them pending behind a device wait on the host flag (part is moved from).
  void finish_hybrid(Pass& p, uint32_t l, uint32_t T, HybridPart& part, float* d);
  // Hybrid segment graphs (hybrid_graphs_): a decode step's launches between one MoE
  // layer's CPU rows and the next MoE layer's routing copies (and before the first / after
  // the last) captured once per span of positions and replayed. segment_begin(idx) comes
  // after MoE layer idx's device products (-1: the step's start): it launches the
  // segment's graph and sets p.replay (the launches up to segment_end are then skipped,
  // their host-side results computed dry), or begins capturing it; segment_end ends a
  // capture and launches what it captured.
  void segment_begin(Pass& p, int idx);
  void segment_end(Pass& p);
  void drop_segment_graphs();
  bool eval_token_hybrid_graph(int32_t token, std::vector<float>* logits);
  // The CPU's expert rows of a layer-step into pin_rows_ (from pin_h_).
  void compute_cpu_part(uint32_t l, uint32_t T, const HybridPart& part);
  // hybrid_ahead(): computes the pending layer-step's CPU rows and raises the flag the
  // stream waits on. Before every host wait on the stream (else it would never return).
  void flush_cpu_part();
  void stage_next_layer(int64_t after);
  void collect_device_times();
  void alloc_tiering_buffers();
  void free_tiering_buffers();

  CudaModel::Impl& m_;
  uint32_t n_ctx_, pos_ = 0;
  QuantType kv_type_;
  uint64_t kv_row_bytes_;
  std::vector<DeviceBuffer> k_, v_;  // per layer (n_ctx, kv_dim) rows of kv_type (none: recurrent layers)
  std::vector<DeviceBuffer> conv_, delta_;  // per recurrent layer: conv window, delta-rule state (f32)
  DeviceBuffer mla_ids_;                    // MLA: (mla_ids_tokens_, n_head) ids[t * n_head + h] = h
  uint32_t mla_ids_tokens_ = 0;
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
  // MOETIER_CUDA_HYBRID_AHEAD=1 (not yet measured, off by default): finish_hybrid queues the
  // CPU rows' copy and everything after it up to the next layer's routing copy behind a
  // device wait on pin_flag_, and the CPU computes its experts afterwards (flush_cpu_part,
  // from the next place_hybrid), so those launches leave the critical path. On when the
  // flag was allocated.
  bool hybrid_ahead() const { return flag_dev_ != nullptr; }
  uint32_t* pin_flag_ = nullptr;        // mapped pinned: the last layer-step whose CPU rows are written
  uint32_t* flag_dev_ = nullptr;        // its device address
  uint32_t flag_seq_ = 0;               // raises so far (host); the device counts its waits in flag_count_dev_
  DeviceBuffer flag_count_dev_;
  // MOETIER_CUDA_HYBRID_GRAPHS=1 (implies the ahead path): decode steps as segment graphs.
  bool hybrid_graphs_ = false;
  static constexpr int kNoSegment = -2;
  std::vector<cudaGraphExec_t> seg_exec_;  // (n_layer + 1) by segment_begin's idx + 1
  std::vector<uint32_t> seg_cap_;          // the n_kv_cap each was captured for
  int seg_capturing_ = kNoSegment;
  struct PendingCpu {
    bool active = false;
    uint32_t l = 0, T = 0, seq = 0;
    HybridPart part;
  };
  PendingCpu pending_;
  // Decode attention over at most this many positions (the graph's n_kv_cap) by the warps
  // kernel in its lanes form (AttentionArgs warp_max, warp_lanes; faster than the grouped
  // kernel at every length measured, 8 to 4096 positions); MOETIER_CUDA_ATTN_WARP_MAX=n
  // sets it, 0: never.
  uint32_t warp_attention_max_ = 4096;
};

}  // namespace detail
}  // namespace mt::cuda
