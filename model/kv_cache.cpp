#include "model/kv_cache.h"

#include <algorithm>

#include "core/check.h"
#include "core/checked_math.h"
#include "core/log.h"
#include "quant/reference.h"

namespace mt {

StatusOr<KvCache> KvCache::create(uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim, QuantType type, bool latent,
                                  const RecurrentShape& recurrent) {
  if (type != QuantType::F16 && type != QuantType::Q8_0 && type != QuantType::F32) {
    return invalid_argument(std::string("KV cache type ") + type_name(type) + " is not supported (f16, q8_0, f32)");
  }
  auto rb = mt::row_bytes(type, kv_dim);
  if (!rb) return invalid_argument(std::string("KV cache type ") + type_name(type) + " needs a KV width that is a multiple of " +
                                   std::to_string(type_traits(type).block_elems) + " (model has " + std::to_string(kv_dim) + ")");
  auto per_layer = checked_mul(*rb, n_ctx);
  auto total = per_layer ? checked_mul(*per_layer, 2ull * n_layer) : std::nullopt;
  if (!total || *total > (1ull << 40)) return out_of_range("KV cache for a context of " + std::to_string(n_ctx) + " is too large");
  KvCache c;
  c.type_ = type;
  c.n_ctx_ = n_ctx;
  c.kv_dim_ = kv_dim;
  c.row_bytes_ = *rb;
  MT_CHECK(recurrent.layers.empty() || recurrent.layers.size() == n_layer);
  c.latent_ = latent;
  c.k_.resize(n_layer);
  if (!latent) c.v_.resize(n_layer);
  c.conv_.resize(n_layer);
  c.delta_.resize(n_layer);
  c.log_.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l) {
    if (!recurrent.layers.empty() && recurrent.layers[l] != 0) {
      c.has_recurrent_ = true;
      c.conv_[l].assign(recurrent.conv_floats, 0.0f);
      c.delta_[l].assign(recurrent.delta_floats, 0.0f);
      continue;
    }
    c.k_[l].resize(*per_layer);
    if (!latent) c.v_[l].resize(*per_layer);
  }
  return c;
}

StatusOr<KvCache> KvCache::for_model(const HParams& hp, uint32_t n_ctx, QuantType type) {
  RecurrentShape recurrent;
  if (!hp.recurrent.empty()) recurrent = {hp.recurrent, hp.conv_state_floats(), hp.delta_state_floats()};
  return create(hp.n_layer, n_ctx, hp.kv_dim(), type, hp.mla, recurrent);
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) {
    total += k_[l].size() + (latent_ ? 0 : v_[l].size()) + 4 * (conv_[l].size() + delta_[l].size());
  }
  return total;
}

void KvCache::reset_recurrent() {
  for (auto& s : conv_) std::fill(s.begin(), s.end(), 0.0f);
  for (auto& s : delta_) std::fill(s.begin(), s.end(), 0.0f);
  recurrent_pos_ = 0;
  logged_n_ = 0;
}

void KvCache::store(uint32_t layer, uint32_t pos, const float* k, const float* v) {
  MT_CHECK(layer < k_.size() && pos < n_ctx_ && !k_[layer].empty());
  quantize_row(type_, k, k_[layer].data() + pos * row_bytes_, kv_dim_);
  if (!latent_) quantize_row(type_, v, v_[layer].data() + pos * row_bytes_, kv_dim_);
}

void KvCache::load_k(uint32_t layer, uint32_t pos, float* out) const {
  MT_CHECK(layer < k_.size() && pos < n_ctx_);
  dequantize_row(type_, k_[layer].data() + pos * row_bytes_, out, kv_dim_);
}

void KvCache::load_v(uint32_t layer, uint32_t pos, float* out) const {
  MT_CHECK(layer < k_.size() && pos < n_ctx_);
  dequantize_row(type_, v_row(layer, pos), out, kv_dim_);
}

}  // namespace mt
