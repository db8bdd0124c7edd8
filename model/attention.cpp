// RMSNorm, RoPE and the attention sub-block (see layers.h).
#include <cmath>

#include "core/check.h"
#include "model/layers.h"
#include "model/linear.h"

namespace mt {

void rms_norm(const float* x, const std::vector<float>& w, float eps, int64_t n, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (w.empty() ? 1.0f : w[static_cast<size_t>(i)]);
}

void rope(float* x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, uint32_t pos, RopeStyle style,
          float freq_base, float freq_scale) {
  // theta_k = pos * scale * base^(-2k / n_rot), built by repeated multiplication in float.
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  for (uint32_t h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<size_t>(h) * head_dim;
    float theta = static_cast<float>(pos) * freq_scale;
    for (uint32_t k = 0; k < n_rot / 2; ++k) {
      const float c = std::cos(theta), s = std::sin(theta);
      const uint32_t i0 = style == RopeStyle::kNorm ? 2 * k : k;
      const uint32_t i1 = style == RopeStyle::kNorm ? 2 * k + 1 : k + n_rot / 2;
      const float x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * c - x1 * s;
      head[i1] = x0 * s + x1 * c;
      theta *= theta_scale;
    }
  }
}

namespace {

void add_bias(float* y, const std::vector<float>& b, uint32_t n_tokens, size_t n) {
  if (b.empty()) return;
  for (uint32_t t = 0; t < n_tokens; ++t) {
    for (size_t i = 0; i < n; ++i) y[t * n + i] += b[i];
  }
}

void trace_rows(Trace* trace, const char* name, const BlockArgs& a, const float* rows, size_t n) {
  if (trace == nullptr) return;
  for (uint32_t t = 0; t < a.n_tokens; ++t) trace->tensor(name, a.layer, a.pos0 + t, {rows + t * n, n});
}

// Causal attention of one token (all heads) over cache positions [0, pos].
void attend(const BlockArgs& a, const float* q, uint32_t pos, float* out) {
  const HParams& hp = a.hp;
  const uint32_t hd = hp.head_dim, group = hp.n_head / hp.n_head_kv;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const uint32_t n_kv = pos + 1;
  std::vector<float> keys(static_cast<size_t>(n_kv) * hp.kv_dim()), values(keys.size());
  for (uint32_t j = 0; j < n_kv; ++j) {
    a.kv.load_k(a.layer, j, &keys[static_cast<size_t>(j) * hp.kv_dim()]);
    a.kv.load_v(a.layer, j, &values[static_cast<size_t>(j) * hp.kv_dim()]);
  }
  // llama.cpp's non-flash path multiplies q by the cached K and the softmax by the cached
  // V, rounding the f32 operand to the cache type first (F16 cache: F16).
  const QuantType cache = a.kv.type();
  a.pool.parallel_for(hp.n_head, [&](int64_t h0, int64_t h1) {
    std::vector<float> qr(hd), pr(n_kv);
    for (int64_t h = h0; h < h1; ++h) {
      const uint32_t kvh = static_cast<uint32_t>(h) / group;
      round_activation(cache, q + h * hd, qr.data(), hd);
      float max_score = -INFINITY;
      for (uint32_t j = 0; j < n_kv; ++j) {
        const float* k = &keys[static_cast<size_t>(j) * hp.kv_dim() + kvh * hd];
        double dot = 0.0;
        for (uint32_t i = 0; i < hd; ++i) dot += static_cast<double>(k[i]) * qr[i];
        pr[j] = static_cast<float>(dot) * kq_scale;
        max_score = std::max(max_score, pr[j]);
      }
      double sum = 0.0;
      for (uint32_t j = 0; j < n_kv; ++j) {
        pr[j] = std::exp(pr[j] - max_score);
        sum += pr[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (uint32_t j = 0; j < n_kv; ++j) pr[j] *= inv;
      if (cache == QuantType::F16) round_activation(QuantType::F16, pr.data(), pr.data(), n_kv);
      float* o = out + h * hd;
      for (uint32_t i = 0; i < hd; ++i) {
        double acc = 0.0;
        for (uint32_t j = 0; j < n_kv; ++j) acc += static_cast<double>(values[static_cast<size_t>(j) * hp.kv_dim() + kvh * hd + i]) * pr[j];
        o[i] = static_cast<float>(acc);
      }
    }
  });
}

}  // namespace

void attention_block(const BlockArgs& a, QkNorm qk_norm, RopeStyle rope_style) {
  const HParams& hp = a.hp;
  const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim();
  const uint32_t T = a.n_tokens;
  std::vector<float> h(T * E), q(T * Q), k(T * KV), v(T * KV), att(T * Q), out(T * E);
  for (uint32_t t = 0; t < T; ++t) rms_norm(a.x + t * E, a.v.attn_norm, hp.rms_eps, E, &h[t * E]);
  trace_rows(a.trace, "attn_norm", a, h.data(), E);

  matmul(a.w.wq, 0, h.data(), T, q.data(), a.pool);
  matmul(a.w.wk, 0, h.data(), T, k.data(), a.pool);
  matmul(a.w.wv, 0, h.data(), T, v.data(), a.pool);
  add_bias(q.data(), a.v.bq, T, Q);
  add_bias(k.data(), a.v.bk, T, KV);
  add_bias(v.data(), a.v.bv, T, KV);

  for (uint32_t t = 0; t < T; ++t) {
    float* qt = &q[t * Q];
    float* kt = &k[t * KV];
    if (qk_norm == QkNorm::kPerHead) {
      for (uint32_t hh = 0; hh < hp.n_head; ++hh) rms_norm(qt + hh * hp.head_dim, a.v.q_norm, hp.rms_eps, hp.head_dim, qt + hh * hp.head_dim);
      for (uint32_t hh = 0; hh < hp.n_head_kv; ++hh) rms_norm(kt + hh * hp.head_dim, a.v.k_norm, hp.rms_eps, hp.head_dim, kt + hh * hp.head_dim);
    } else if (qk_norm == QkNorm::kFullWidth) {
      rms_norm(qt, a.v.q_norm, hp.rms_eps, Q, qt);
      rms_norm(kt, a.v.k_norm, hp.rms_eps, KV, kt);
    }
    const uint32_t pos = a.pos0 + t;
    rope(qt, hp.n_head, hp.head_dim, hp.n_rot, pos, rope_style, hp.rope_freq_base, hp.rope_freq_scale);
    rope(kt, hp.n_head_kv, hp.head_dim, hp.n_rot, pos, rope_style, hp.rope_freq_base, hp.rope_freq_scale);
    a.kv.store(a.layer, pos, kt, &v[t * KV]);
  }
  trace_rows(a.trace, "Qcur", a, q.data(), Q);
  trace_rows(a.trace, "Kcur", a, k.data(), KV);
  trace_rows(a.trace, "Vcur", a, v.data(), KV);

  for (uint32_t t = 0; t < T; ++t) attend(a, &q[t * Q], a.pos0 + t, &att[t * Q]);
  trace_rows(a.trace, "kqv_out", a, att.data(), Q);

  matmul(a.w.wo, 0, att.data(), T, out.data(), a.pool);
  trace_rows(a.trace, "attn_out", a, out.data(), E);
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
