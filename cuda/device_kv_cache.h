// One sequence's device KV cache: per attention layer (n_ctx, kv_dim) K and V rows of the
// cache type as the CPU's KvCache stores them (MLA: one latent row per position, read as
// K and V, no V rows); per recurrent layer (Gated DeltaNet) its conv window and delta-rule
// state in f32, zero at position 0; and, for MLA, the per-head id table its grouped
// products read. Positions are the sequence's; the cache knows only their capacity. A
// prefix of positions is copied from another cache of the same model on the device
// (copy_prefix: a fork shares a prompt's work).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels/memory.h"
#include "model/hparams.h"
#include "quant/types.h"

namespace mt::cuda {

class DeviceKvCache {
 public:
  // The cache of `hp`'s layers for n_ctx positions of `type` (F16, Q8_0 or F32; the caller
  // checked it); recurrent states zeroed.
  DeviceKvCache(const HParams& hp, uint32_t n_ctx, QuantType type);

  uint32_t n_ctx() const { return n_ctx_; }
  QuantType type() const { return type_; }
  uint64_t row_bytes() const { return row_bytes_; }  // one position's row (all KV heads)
  uint8_t* k(uint32_t layer) const { return k_[layer].as<uint8_t>(); }  // null: a recurrent layer
  uint8_t* v(uint32_t layer) const { return v_[layer].as<uint8_t>(); }  // null: recurrent, or MLA
  float* conv(uint32_t layer) const { return conv_[layer].as<float>(); }    // null: an attention layer
  float* delta(uint32_t layer) const { return delta_[layer].as<float>(); }  // null: an attention layer
  bool has_states() const { return has_states_; }  // some layer is recurrent

  // Positions [0, n) of every attention layer's rows and every recurrent layer's states
  // (which hold `from`'s position: n must be it) copied from `from`, a cache of the same
  // model and type, on `stream` (device to device, no host wait).
  void copy_prefix(const DeviceKvCache& from, uint32_t n, cudaStream_t stream);
  // The recurrent states back to position 0 (zeros), on `stream`.
  void reset_states(cudaStream_t stream);

  // Speculative verification on a recurrent model (Backend::keep_run_rollback): a run of 2
  // to max_run tokens keeps, per recurrent layer, its states from before the run and the
  // run's inputs to them (the conv's raw rows; the delta rule's u rows, decays and step
  // sizes), so that the sequence can go back into it (CudaSequence::rollback_run): the
  // conv window rebuilt from them, the delta state from before the run and its kept tokens
  // again. A fixed-size copy per run, no copy of any state at rollback beyond one layer's.
  struct RunLog {
    DeviceBuffer conv_before, conv_rows, delta_before, u_rows, g, beta, out;
  };
  void enable_run_log(const HParams& hp, uint32_t max_run);  // 0: off (buffers freed)
  bool logs_run(uint32_t n) const { return has_states_ && n >= 2 && n <= log_max_run_; }
  RunLog& run_log(uint32_t layer) { return log_[layer]; }
  // The last logged run: its first position and length (0: none, or a later run was not logged).
  void set_logged_run(uint32_t pos0, uint32_t n) { logged_pos0_ = pos0, logged_n_ = n; }
  uint32_t logged_pos0() const { return logged_pos0_; }
  uint32_t logged_n() const { return logged_n_; }

  // MLA: the (tokens, n_head) table ids[t * n_head + h] = h of the grouped per-head
  // products, built once for at least `tokens` rows (synchronously; before any capture).
  void build_head_ids(uint32_t n_head, uint32_t tokens);
  const int32_t* head_ids() const { return head_ids_.as<int32_t>(); }
  uint32_t head_id_rows() const { return head_id_rows_; }

 private:
  uint32_t n_ctx_;
  QuantType type_;
  uint64_t row_bytes_;
  bool has_states_ = false;
  std::vector<DeviceBuffer> k_, v_;         // per layer (n_ctx, kv_dim) rows, or none
  std::vector<DeviceBuffer> conv_, delta_;  // per recurrent layer: conv window, delta-rule state (f32)
  std::vector<RunLog> log_;                 // per layer (recurrent ones filled) while logging
  uint32_t log_max_run_ = 0, logged_pos0_ = 0, logged_n_ = 0;
  DeviceBuffer head_ids_;                   // MLA: (head_id_rows_, n_head)
  uint32_t head_id_rows_ = 0;
};

}  // namespace mt::cuda
