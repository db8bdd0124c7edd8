// The device KV cache (cuda/device_kv_cache.h).
#include "cuda/device_kv_cache.h"

#include <utility>

#include "core/check.h"
#include "cuda/kernels/check.h"

namespace mt::cuda {

DeviceKvCache::DeviceKvCache(const HParams& hp, uint32_t n_ctx, QuantType type)
    : n_ctx_(n_ctx), type_(type), row_bytes_(*mt::row_bytes(type, hp.kv_dim())) {
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    const bool recurrent = hp.is_recurrent(l);  // Gated DeltaNet: states, no rows
    has_states_ = has_states_ || recurrent;
    k_.emplace_back(recurrent ? 0 : row_bytes_ * n_ctx);
    v_.emplace_back(recurrent || hp.mla ? 0 : row_bytes_ * n_ctx);  // MLA: one latent row, read as K and V
    conv_.emplace_back(recurrent ? sizeof(float) * hp.conv_state_floats() : 0);
    delta_.emplace_back(recurrent ? sizeof(float) * hp.delta_state_floats() : 0);
    for (DeviceBuffer* b : {&conv_.back(), &delta_.back()}) {
      if (b->bytes() > 0) MT_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
    }
  }
}

void DeviceKvCache::copy_prefix(const DeviceKvCache& from, uint32_t n, cudaStream_t stream) {
  MT_CHECK(from.type_ == type_ && from.row_bytes_ == row_bytes_ && from.k_.size() == k_.size());
  MT_CHECK(n <= n_ctx_ && n <= from.n_ctx_);
  const uint64_t bytes = row_bytes_ * n;
  for (size_t l = 0; l < k_.size(); ++l) {
    const std::pair<const DeviceBuffer*, DeviceBuffer*> rows[] = {{&from.k_[l], &k_[l]}, {&from.v_[l], &v_[l]}};
    for (const auto& [src, dst] : rows) {
      if (dst->bytes() > 0 && bytes > 0) {
        MT_CUDA_CHECK(cudaMemcpyAsync(dst->get(), src->get(), bytes, cudaMemcpyDeviceToDevice, stream));
      }
    }
    const std::pair<const DeviceBuffer*, DeviceBuffer*> states[] = {{&from.conv_[l], &conv_[l]},
                                                                    {&from.delta_[l], &delta_[l]}};
    for (const auto& [src, dst] : states) {
      MT_CHECK(src->bytes() == dst->bytes());
      if (dst->bytes() > 0) {
        MT_CUDA_CHECK(cudaMemcpyAsync(dst->get(), src->get(), dst->bytes(), cudaMemcpyDeviceToDevice, stream));
      }
    }
  }
}

void DeviceKvCache::reset_states(cudaStream_t stream) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    for (DeviceBuffer* b : {&conv_[l], &delta_[l]}) {
      if (b->bytes() > 0) MT_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), stream));
    }
  }
}

void DeviceKvCache::enable_run_log(const HParams& hp, uint32_t max_run) {
  log_.clear();
  log_max_run_ = has_states_ ? max_run : 0;
  logged_pos0_ = logged_n_ = 0;
  if (log_max_run_ < 2) return;
  const size_t f = sizeof(float), C = hp.ssm_conv_dim(), n = log_max_run_;
  log_.resize(hp.n_layer);
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.is_recurrent(l)) continue;
    RunLog& lg = log_[l];
    lg.conv_before = DeviceBuffer(f * hp.conv_state_floats());
    lg.conv_rows = DeviceBuffer(f * n * C);
    lg.delta_before = DeviceBuffer(f * hp.delta_state_floats());
    lg.u_rows = DeviceBuffer(f * n * C);
    lg.g = DeviceBuffer(f * n * hp.ssm_nv);
    lg.beta = DeviceBuffer(f * n * hp.ssm_nv);
    lg.out = DeviceBuffer(f * n * hp.ssm_value_dim());
  }
}

void DeviceKvCache::build_head_ids(uint32_t n_head, uint32_t tokens) {
  std::vector<int32_t> ids(static_cast<size_t>(tokens) * n_head);  // (tokens, H): slot t*H+h -> h
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % n_head);
  head_ids_ = DeviceBuffer(ids.size() * sizeof(int32_t));
  MT_CUDA_CHECK(cudaMemcpy(head_ids_.get(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  head_id_rows_ = tokens;
}

}  // namespace mt::cuda
