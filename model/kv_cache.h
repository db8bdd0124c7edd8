// KvCache: per layer, the keys and values of every position seen so far.
//
// Layout per layer: K and V each (n_ctx, kv_dim) rows in the cache type (F16 by default,
// Q8_0 as an option: a row is kv_dim / 32 blocks). Position p's row is written once when
// the token at p is evaluated and read by every later token's attention.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "quant/types.h"

namespace mt {

class KvCache {
 public:
  // latent: one row per position whose leading part is also the value (MLA): no V rows are
  // stored, v_row() is k_row().
  static StatusOr<KvCache> create(uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim, QuantType type, bool latent = false);

  QuantType type() const { return type_; }
  uint32_t n_ctx() const { return n_ctx_; }
  uint64_t bytes() const { return (latent_ ? 1ull : 2ull) * k_.size() * (k_.empty() ? 0 : k_[0].size()); }

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
  std::vector<std::vector<uint8_t>> k_, v_;  // per layer: n_ctx * row_bytes
};

}  // namespace mt
