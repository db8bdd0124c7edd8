// NextN (MTP) drafting on the CPU: the block after the main stack and its head, evaluated
// over entries that pair the trunk's final hidden state at p with the token at p + 1
// (model.h eval_nextn; the math: weights.h NextnWeights).
#include <string>

#include "model/archs/blocks.h"
#include "model/linear.h"
#include "model/model.h"
#include "quant/reference.h"

namespace mt {

Status Model::nextn_status() const {
  if (has_nextn()) return {};
  if (hp_.n_nextn == 0) {
    return unimplemented(std::string("this ") + std::string(arch_info(hp_.arch).name) +
                         " file has no NextN (MTP) block (nextn_predict_layers is 0)");
  }
  return unimplemented("the file's NextN (MTP) block cannot be used: " + weights_.nextn_status.to_string());
}

StatusOr<KvCache> Model::new_nextn_cache(uint32_t n_ctx, QuantType type) const {
  MT_RETURN_IF_ERROR(nextn_status());
  MT_RETURN_IF_ERROR(new_kv_cache(n_ctx, type).status());  // the same checks of n_ctx and the type
  return KvCache::for_model(nextn_hp_, n_ctx, type);
}

Status Model::eval_nextn(std::span<const int32_t> tokens, const float* hidden, uint32_t pos0, KvCache& kv, float* logits,
                         float* hidden_out) const {
  MT_RETURN_IF_ERROR(nextn_status());
  const auto n = static_cast<uint32_t>(tokens.size());
  if (n == 0) return invalid_argument("no NextN entries to evaluate");
  if (static_cast<uint64_t>(pos0) + n > kv.n_ctx()) {
    return out_of_range("NextN cache full: " + std::to_string(pos0) + " + " + std::to_string(n) + " entries exceed " +
                        std::to_string(kv.n_ctx()));
  }
  const NextnWeights& w = weights_.nextn.front();
  const Tensor& embed = w.embed_tokens.present() ? w.embed_tokens : weights_.token_embd;
  const size_t E = hp_.n_embd;
  // x = eh_proj . [enorm(embed(token)) | hnorm(hidden)], the embedding first.
  std::vector<float> joined(static_cast<size_t>(n) * 2 * E), row(E);
  for (uint32_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || static_cast<uint32_t>(tokens[t]) >= hp_.n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[t]) + " is outside the vocabulary");
    }
    dequantize_row(embed.type, embed.row(static_cast<uint64_t>(tokens[t])), row.data(), static_cast<int64_t>(E));
    rms_norm(row.data(), nextn_enorm_, hp_.rms_eps, static_cast<int64_t>(E), &joined[t * 2 * E]);
    rms_norm(&hidden[t * E], nextn_hnorm_, hp_.rms_eps, static_cast<int64_t>(E), &joined[t * 2 * E + E]);
  }
  std::vector<float> x(static_cast<size_t>(n) * E);  // (n, n_embd) the block's residual stream
  matmul(w.eh_proj, 0, joined.data(), n, x.data(), *pool_);
  const SeqRows rows{0, n, pos0, &kv};
  const BlockArgs args{nextn_hp_, w.block, nextn_vectors_, 0, x.data(), n, {&rows, 1}, *pool_, nullptr, nullptr};
  block_fn(hp_.arch)(args);
  // The last entry's head: its normed output and the logits of the token after it.
  rms_norm(&x[(n - 1) * E], nextn_head_norm_, hp_.rms_eps, static_cast<int64_t>(E), hidden_out);
  matmul(w.shared_head_head.present() ? w.shared_head_head : weights_.output, 0, hidden_out, 1, logits, *pool_);
  return {};
}

}  // namespace mt
