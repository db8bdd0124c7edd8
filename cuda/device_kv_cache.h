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
  DeviceBuffer head_ids_;                   // MLA: (head_id_rows_, n_head)
  uint32_t head_id_rows_ = 0;
};

}  // namespace mt::cuda
