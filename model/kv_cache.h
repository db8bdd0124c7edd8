// KvCache: per layer, the keys and values of every position seen so far.
//
// Layout per layer: K and V each (n_ctx, kv_dim) rows in the cache type (F16 by default,
// Q8_0 as an option: a row is kv_dim / 32 blocks). Position p's row is written once when
// the token at p is evaluated and read by every later token's attention.
//
// Recurrent (Gated DeltaNet) layers keep no rows: a fixed-size F32 state instead (the conv
// window and the delta-rule matrices), updated in place by every token. Such a state
// cannot go back: a cache with recurrent layers only continues at recurrent_pos() or
// starts over at position 0 (Model::eval_batch enforces it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/hparams.h"
#include "quant/types.h"

namespace mt {

// What a recurrent layer keeps of the last logged run so that the run can be cut short
// afterwards (speculative decoding's rejected guesses): its two states from before the run
// and the run's inputs to them. Fixed-size states, n rows of inputs: no position's cache is
// copied (model/gated_delta_net.h: rollback_recurrent).
struct RecurrentRunLog {
  std::vector<float> conv_before, delta_before;  // the states before the run
  std::vector<float> conv_rows;                  // (n, C) the conv's raw input rows
  std::vector<float> delta_rows;                 // (n, C) the conv's output: q | k | v heads
  std::vector<float> gdecay, beta;               // (n, nv) each
};

// Which layers are recurrent, and the floats of their two states.
struct RecurrentShape {
  std::vector<uint8_t> layers;
  uint64_t conv_floats = 0, delta_floats = 0;
};

class KvCache {
 public:
  // latent: one row per position whose leading part is also the value (MLA): no V rows are
  // stored, v_row() is k_row().
  // recurrent: per layer 1 where the layer keeps conv_floats + delta_floats of state instead
  // of rows (empty: every layer has rows).
  static StatusOr<KvCache> create(uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim, QuantType type, bool latent = false,
                                  const RecurrentShape& recurrent = {});
  // The cache a model's sequence needs: rows per attention layer (one latent row for MLA),
  // states for its recurrent layers.
  static StatusOr<KvCache> for_model(const HParams& hp, uint32_t n_ctx, QuantType type);

  // A recurrent layer's states (zero at creation and after reset_recurrent()).
  float* conv_state(uint32_t layer) { return conv_[layer].data(); }
  float* delta_state(uint32_t layer) { return delta_[layer].data(); }
  bool has_recurrent() const { return has_recurrent_; }
  uint32_t recurrent_pos() const { return recurrent_pos_; }  // positions the states have absorbed
  void set_recurrent_pos(uint32_t pos) { recurrent_pos_ = pos; }
  void reset_recurrent();

  // Logging for rollback: runs of 2..max_run tokens of this sequence keep, per recurrent
  // layer, a RecurrentRunLog (0: off, the default). logged_run(): the last logged run's
  // first position and length (length 0: none, or a later run was not logged).
  void set_log_runs(uint32_t max_run) { log_max_run_ = max_run; }
  bool logs_run(uint32_t n) const { return has_recurrent_ && n >= 2 && n <= log_max_run_; }
  RecurrentRunLog& run_log(uint32_t layer) { return log_[layer]; }
  void set_logged_run(uint32_t pos0, uint32_t n) { logged_pos0_ = pos0, logged_n_ = n; }
  uint32_t logged_pos0() const { return logged_pos0_; }
  uint32_t logged_n() const { return logged_n_; }

  QuantType type() const { return type_; }
  uint32_t n_ctx() const { return n_ctx_; }
  uint64_t bytes() const;

  void store(uint32_t layer, uint32_t pos, const float* k, const float* v);
  // The raw K or V row (kv_dim elements in the cache type) of one position, and its size.
  const uint8_t* k_row(uint32_t layer, uint32_t pos) const { return k_[layer].data() + pos * row_bytes_; }
  const uint8_t* v_row(uint32_t layer, uint32_t pos) const { return (latent_ ? k_ : v_)[layer].data() + pos * row_bytes_; }
  uint64_t row_bytes() const { return row_bytes_; }
  // Dequantized K or V row (kv_dim floats) of one position.
  void load_k(uint32_t layer, uint32_t pos, float* out) const;
  void load_v(uint32_t layer, uint32_t pos, float* out) const;

 private:
  QuantType type_ = QuantType::F16;
  uint32_t n_ctx_ = 0;
  uint32_t kv_dim_ = 0;
  uint64_t row_bytes_ = 0;
  bool latent_ = false;
  std::vector<std::vector<uint8_t>> k_, v_;  // per layer: n_ctx * row_bytes (empty for recurrent layers)
  std::vector<std::vector<float>> conv_, delta_;  // per layer: recurrent state (empty for attention layers)
  bool has_recurrent_ = false;
  uint32_t recurrent_pos_ = 0;
  uint32_t log_max_run_ = 0, logged_pos0_ = 0, logged_n_ = 0;
  std::vector<RecurrentRunLog> log_;  // per layer (sized with the states)
};

}  // namespace mt
