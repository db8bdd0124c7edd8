// The whole model on one GPU: every weight uploaded in its GGUF layout, the KV cache in
// device memory, the forward pass as the CPU's (model/) with each step's operations
// launched on one stream (cuda/kernels/ops.h, cuda/kernels/matmul.h). A prompt is run in micro-batches of
// kMicroBatch tokens (MOETIER_CUDA_UBATCH overrides it); logits come back for the rows
// asked. Decode tokens replay a captured CUDA graph (the position read on the device;
// MOETIER_CUDA_GRAPHS=0 turns it off) over weights laid out for few launches
// (cuda/device_weights.h) and fused ops (cuda/kernels/ops.h). A Trace receives the routing (ids
// and weights copied back per MoE layer; such steps are not graphed); tensor dumps are
// CPU-only. MOETIER_CUDA_PROFILE=1 prints where the device time went (cuda/kernels/stage_timer.h).
// Host-only header: callers never see CUDA types.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/evaluator.h"
#include "model/model.h"

namespace mt::cuda {

struct CudaOptions {
  int device = 0;
  // Routed experts stay in host memory: nothing of them is uploaded, and MoE layers run
  // through the tiering given to set_tiering() (cuda/tiering.h).
  bool experts_on_host = false;
};

struct CudaTiering;

class CudaModel {
 public:
  static constexpr uint32_t kMicroBatch = 2048;
  // Tiered prefill streams every expert bank once per micro-batch: a prompt up to this
  // many tokens is one micro-batch.
  static constexpr uint32_t kStreamMicroBatch = 4096;

  // Uploads every weight of `model`, which must have been loaded with
  // LoadOptions::interleave = false (the device reads the file's layout). Errors: no
  // device, a weight type without device kernels, not enough device memory.
  static StatusOr<std::unique_ptr<CudaModel>> load(const Model& model, const CudaOptions& options = {});
  ~CudaModel();

  // A sequence with its own device KV cache (F16, Q8_0 or F32).
  StatusOr<std::unique_ptr<Evaluator>> new_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16);
  // `to` becomes a copy of `from` (both sequences of this model, the same KV type, from's
  // position within to's context): from's K / V rows of its positions (recurrent layers:
  // their states) copied on the device, to's position set to from's. Speculative decoding
  // forks a sequence, then truncates the copy back to the accepted tokens.
  Status fork_sequence(const Evaluator& from, Evaluator& to);
  // The sequence's position set back to n <= its position (the later rows are overwritten
  // by the next tokens). A recurrent model (Gated DeltaNet) keeps only the last position's
  // state: it accepts n == position and n == 0 only (0 zeroes the states).
  Status truncate_sequence(Evaluator& e, uint32_t n);
  // Backend::keep_run_rollback for a sequence of this model (cuda/sequence.h).
  Status keep_run_rollback(Evaluator& e, uint32_t max_run);

  // One sequence's tokens of a batch: `want` flags the rows whose logits are asked (empty:
  // none).
  struct Feed {
    Evaluator* seq = nullptr;
    std::span<const int32_t> tokens;
    std::span<const uint8_t> want;
  };
  // Several sequences of this model evaluated together: passes of up to a micro-batch of
  // rows, each holding rows of several sequences, so every product and every selected
  // expert's weights are read once per pass for all of them (attention per sequence over
  // its own cache). The asked rows' logits in feed order, (n asked, n_vocab). Errors
  // (nothing evaluated): another model's sequence, one given twice, a token outside the
  // vocabulary, a context overflow.
  Status eval_batch(std::span<const Feed> feeds, std::vector<float>* logits, Trace* trace = nullptr);

  uint64_t weight_bytes() const;
  // The tiering the MoE layers of an experts_on_host model run through (not owned; must
  // outlive the sequences). Required before new_sequence() for such a model.
  void set_tiering(CudaTiering* tiering);
  const Model& host() const { return model_; }

  struct Impl;  // cuda/sequence.h

 private:
  CudaModel(const Model& m, std::unique_ptr<Impl> impl);
  const Model& model_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::cuda
