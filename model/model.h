// Model: a GGUF file loaded for inference on the CPU (weights stay in the memory map),
// and Session: one sequence's KV cache and position (tests and `moetier profile`; the
// commands and the server evaluate through CpuBackend, model/cpu_backend.h).
//
// eval() runs a batch of tokens at the session's next positions through every block and
// returns logits for every token (or only the last). A batch and the same tokens one at
// a time give the same numbers (layers.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/malloc_ptr.h"
#include "core/parallel.h"
#include "core/status.h"
#include "gguf/reader.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/evaluator.h"
#include "model/weights.h"

namespace mt {

struct MoeOffload;

struct LoadOptions {
  int n_threads = 0;  // 0: all hardware threads
  // Copy the matrices of types with an interleaved layout (cpu/repack.h) into it at load,
  // when this CPU has a kernel for it. The copy replaces the memory-mapped bytes for
  // compute (same size); off keeps every weight zero-copy in the map.
  bool interleave = true;
  // Interleave only the routed experts (the GPU tiering: dense weights go to the device
  // in the file's layout, the CPU computes cold experts from interleaved copies).
  bool interleave_experts_only = false;
};

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& options = {});

  const HParams& hparams() const { return hp_; }
  const gguf::GgufFile& file() const { return file_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() const { return *pool_; }
  const std::vector<LayerVectors>& vectors() const { return vectors_; }
  const std::vector<float>& output_norm() const { return output_norm_; }

  // Evaluates `tokens` at positions [pos0, pos0 + n). logits: n x n_vocab when
  // all_logits, else the last token's n_vocab. Token ids must be < n_vocab.
  // With an offload, the MoE layers run through its scheduler and device (one step per call).
  Status eval(std::span<const int32_t> tokens, uint32_t pos0, KvCache& kv, bool all_logits, std::vector<float>* logits,
              Trace* trace = nullptr, MoeOffload* offload = nullptr) const;

  // One step over several sequences at once (continuous batching): each sequence's tokens
  // at its positions in its own KV cache; the projections and the MoE layers see all rows
  // together. logits gets, in sequence order, the rows of each sequence that rows marks
  // (when given), else every row with all_logits, else its last row when last_logits,
  // else nothing. Results equal per-sequence eval.
  struct SeqBatch {
    std::span<const int32_t> tokens;
    uint32_t pos0 = 0;
    KvCache* kv = nullptr;
    bool all_logits = false, last_logits = true;
    std::span<const uint8_t> rows;  // empty, or per token 1 where its logits are returned
    float* hidden = nullptr;        // (n, n_embd) when given: each token's final hidden state (after output_norm)
  };
  Status eval_batch(std::span<const SeqBatch> seqs, std::vector<float>* logits, Trace* trace = nullptr,
                    MoeOffload* offload = nullptr) const;

  // A KV cache for one sequence of n_ctx positions. Errors: n_ctx 0, a cache type whose
  // blocks do not divide the head size.
  StatusOr<KvCache> new_kv_cache(uint32_t n_ctx, QuantType type) const;

  // NextN (MTP) drafting (model/nextn.cpp; the block and its head: weights.h NextnWeights).
  // Entry p of a NextN cache pairs the trunk's hidden state at p (SeqBatch::hidden) with
  // the token at p + 1 and guesses the token at p + 2; it is stored at position p (RoPE is
  // relative, so the shift by one the reference describes changes nothing).
  bool has_nextn() const { return !weights_.nextn.empty(); }
  Status nextn_status() const;  // ok with a NextN block; else what is missing
  // A one-layer cache for the NextN block's attention.
  StatusOr<KvCache> new_nextn_cache(uint32_t n_ctx, QuantType type) const;
  // Evaluates entries [pos0, pos0 + n): tokens (n) are the tokens at p + 1, hidden (n,
  // n_embd) the hidden states at p. Writes the last entry's logits (n_vocab) and its
  // normed output (n_embd, the hidden state a chained guess pairs with its token).
  Status eval_nextn(std::span<const int32_t> tokens, const float* hidden, uint32_t pos0, KvCache& kv, float* logits,
                    float* hidden_out) const;

 private:
  Model() = default;
  gguf::GgufFile file_;
  HParams hp_;
  std::vector<HParams> layer_hp_;  // hp_.for_layer(l), made once at load
  ModelWeights weights_;
  std::vector<LayerVectors> vectors_;
  std::vector<float> output_norm_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<MallocPtr<uint8_t>> interleaved_;  // storage of interleaved matrices
  HParams nextn_hp_;                             // the NextN block's view: one full-attention layer
  LayerVectors nextn_vectors_;
  std::vector<float> nextn_enorm_, nextn_hnorm_, nextn_head_norm_;
};

// One sequence on the CPU: its KV cache and the next position.
class Session final : public Evaluator {
 public:
  static StatusOr<Session> create(const Model& model, uint32_t n_ctx, QuantType kv_type = QuantType::F16);
  // Appends tokens and returns their logits (see Model::eval).
  Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits,
              Trace* trace = nullptr) override;
  uint32_t position() const override { return pos_; }
  // MoE layers of later feeds run offloaded (null: on the CPU). Not owned.
  void set_offload(MoeOffload* offload) { offload_ = offload; }
  uint32_t n_ctx() const override { return kv_.n_ctx(); }

 private:
  Session(const Model& m, KvCache kv) : model_(&m), kv_(std::move(kv)) {}
  const Model* model_;
  KvCache kv_;
  uint32_t pos_ = 0;
  MoeOffload* offload_ = nullptr;
};

}  // namespace mt
