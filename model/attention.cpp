// RMSNorm, RoPE and the attention sub-block (see layers.h).
//
// Attention reads the KV cache in place, in tiles of up to 4 consecutive queries of one
// head: the scores of every cached position are dots of the cache's K rows with q rounded
// to the cache type (as llama.cpp's non-flash path rounds q before its K matmul), each K
// row read once per tile; a softmax per query over its causal range in a per-thread
// buffer of n_kv floats per query (the probabilities rounded to F16 for an F16 cache, as
// llama.cpp rounds them before the V matmul); then each V row, read once per tile, is
// accumulated into every query of the tile that sees it. Memory is O(tile x n_kv) per
// thread, never n_tokens^2; (query tile, head) units are split over the pool, so decode
// (one token, all heads) and prefill keep every thread busy.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "cpu/kernels.h"
#include "model/activations.h"
#include "model/attend.h"
#include "model/layers.h"
#include "model/linear.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt {

void rms_norm(const float* x, const std::vector<float>& w, float eps, int64_t n, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (w.empty() ? 1.0f : w[static_cast<size_t>(i)]);
}

void softmax_with_sink(float* x, size_t n, float sink) {
  const float mx = std::max(*std::max_element(x, x + n), sink);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  sum += static_cast<double>(std::exp(sink - mx));
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

// exp(-inf - max) adds an exact 0 to the sum: the same bits as a softmax without a sink.
void softmax(float* x, size_t n) { softmax_with_sink(x, n, -INFINITY); }

// theta built by repeated multiplication in float (as llama.cpp does). YaRN as ggml's
// rope: correction dims [lo, hi] where the rotation's wavelength crosses n_ctx_orig /
// beta_fast and / beta_slow; pair k mixes interpolated and extrapolated angles by
// ramp(k) = 1 - clamp((k - lo) / max(0.001, hi - lo), 0, 1).
RopeYarn rope_yarn(const HParams& hp, uint32_t n_rot) {
  const float freq_base = hp.rope_freq_base, freq_scale = hp.rope_freq_scale;
  auto corr_dim = [&](float beta) {  // ggml's expression, in its order
    return static_cast<float>(n_rot) * std::log(static_cast<float>(hp.n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  RopeYarn y;
  y.lo = std::max(0.0f, std::floor(corr_dim(hp.yarn_beta_fast)));
  y.hi = std::min(static_cast<float>(n_rot - 1), std::ceil(corr_dim(hp.yarn_beta_slow)));
  y.mscale = hp.rope_attn_factor * (1.0f + 0.1f * std::log(1.0f / freq_scale));
  return y;
}

void rope_angles(const HParams& hp, uint32_t n_rot, uint32_t pos, float* cos_out, float* sin_out) {
  const float freq_base = hp.rope_freq_base, freq_scale = hp.rope_freq_scale;
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  if (hp.yarn_ext == 0.0f) {
    float theta = static_cast<float>(pos) * freq_scale;
    for (uint32_t k = 0; k < n_rot / 2; ++k) {
      cos_out[k] = std::cos(theta);
      sin_out[k] = std::sin(theta);
      theta *= theta_scale;
    }
    if (hp.rope_attn_factor != 1.0f) {
      for (uint32_t k = 0; k < n_rot / 2; ++k) {
        cos_out[k] *= hp.rope_attn_factor;
        sin_out[k] *= hp.rope_attn_factor;
      }
    }
    return;
  }
  const RopeYarn yarn = rope_yarn(hp, n_rot);
  const float lo = yarn.lo, hi = yarn.hi, mscale = yarn.mscale;
  float theta_extrap = static_cast<float>(pos);
  for (uint32_t k = 0; k < n_rot / 2; ++k) {
    const float theta_interp = freq_scale * theta_extrap;
    const float y = (static_cast<float>(k) - lo) / std::max(0.001f, hi - lo);
    const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * hp.yarn_ext;
    const float theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
    cos_out[k] = std::cos(theta) * mscale;
    sin_out[k] = std::sin(theta) * mscale;
    theta_extrap *= theta_scale;
  }
}

void rope_apply(float* x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, RopeStyle style, const float* c,
                const float* s) {
  for (uint32_t h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<size_t>(h) * head_dim;
    for (uint32_t k = 0; k < n_rot / 2; ++k) {
      const uint32_t i0 = style == RopeStyle::kNorm ? 2 * k : k;
      const uint32_t i1 = style == RopeStyle::kNorm ? 2 * k + 1 : k + n_rot / 2;
      const float x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * c[k] - x1 * s[k];
      head[i1] = x0 * s[k] + x1 * c[k];
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

// Query tile: consecutive tokens of one head that share every K and V row read.
constexpr uint32_t kQueryTile = 4;

struct AttendArgs {
  const BlockArgs& a;
  const KvCache& kv;
  const cpu::KernelTable& k;
  QuantType cache;
  const AttendShape& shape;
};

// Causal attention of n_q (<= kQueryTile) consecutive tokens at positions first ..
// first + n_q - 1, head h: query i attends to cache positions [0, first + i]. Each K and
// V row is read once for the whole tile; per query the arithmetic is that of the query
// alone (the same dots, sums in the same order), so any tiling gives the same bits.
// q_i = q + i * q_stride (hd_k floats), out_i = out + i * out_stride (hd_v floats).
void attend_tile(const AttendArgs& args, uint32_t first, uint32_t n_q, uint32_t h, const float* q, size_t q_stride,
                 float* out, size_t out_stride) {
  const BlockArgs& a = args.a;
  const AttendShape& sh = args.shape;
  const uint32_t hd = sh.hd_k, hv = sh.hd_v, kvh = h / sh.group;
  const uint32_t n_kv = first + n_q;  // the last query's
  const QuantType act = cpu::activation_type(args.cache);
  const size_t act_bytes = cpu::activation_row_bytes(args.cache, hd);
  thread_local std::vector<uint8_t> q_packed;
  thread_local std::vector<float> scores, v_tmp;  // scores: n_q rows of n_kv
  q_packed.resize(act_bytes * n_q);
  if (scores.size() < static_cast<size_t>(n_kv) * n_q) scores.resize(static_cast<size_t>(n_kv) * n_q);
  if (v_tmp.size() < hv) v_tmp.resize(hv);
  for (uint32_t i = 0; i < n_q; ++i) args.k.quantize[static_cast<uint32_t>(act)](q + i * q_stride, &q_packed[i * act_bytes], hd);
  const cpu::VecDotFn dot = args.k.vec_dot[static_cast<uint32_t>(args.cache)];
  const size_t offset = kvh * sh.k_head_bytes, v_offset = kvh * sh.v_head_bytes;

  // Query i (position first + i) sees [lo(i), first + i]: everything, or its window.
  auto lo = [&](uint32_t i) { return sh.window == 0 || first + i + 1 <= sh.window ? 0u : first + i + 1 - sh.window; };
  const uint32_t j0 = lo(0);
  for (uint32_t j = j0; j < n_kv; ++j) {
    const uint8_t* k_row = args.kv.k_row(a.layer, j) + offset;
    for (uint32_t i = (j > first ? j - first : 0); i < n_q; ++i) {
      if (j < lo(i)) break;  // lo grows with i
      scores[static_cast<size_t>(i) * n_kv + j] = dot(hd, k_row, &q_packed[i * act_bytes]) * sh.kq_scale;
    }
  }
  for (uint32_t i = 0; i < n_q; ++i) {
    float* s = &scores[static_cast<size_t>(i) * n_kv + lo(i)];
    const uint32_t len = first + i + 1 - lo(i);
    if (sh.sinks != nullptr) {
      softmax_with_sink(s, len, sh.sinks[h]);
    } else {
      softmax(s, len);
    }
    if (args.cache == QuantType::F16) {
      for (uint32_t j = 0; j < len; ++j) s[j] = fp16_to_fp32(fp32_to_fp16(s[j]));
    }
    std::fill(out + i * out_stride, out + i * out_stride + hv, 0.0f);
  }
  // i1: the queries whose window still holds j (those before it).
  for (uint32_t j = j0; j < n_kv; ++j) {
    const uint8_t* v_row = args.kv.v_row(a.layer, j) + v_offset;
    const uint32_t i0 = j > first ? j - first : 0;
    uint32_t i1 = n_q;
    while (i1 > i0 && j < lo(i1 - 1)) --i1;
    if (args.cache == QuantType::F16) {
      for (uint32_t i = i0; i < i1; ++i) args.k.axpy_f16(hv, scores[static_cast<size_t>(i) * n_kv + j], v_row, out + i * out_stride);
      continue;
    }
    dequantize_row(args.cache, v_row, v_tmp.data(), hv);
    for (uint32_t i = i0; i < i1; ++i) {
      const float p = scores[static_cast<size_t>(i) * n_kv + j];
      float* o = out + i * out_stride;
      for (uint32_t e = 0; e < hv; ++e) o[e] += p * v_tmp[e];
    }
  }
}

}  // namespace

void attend_all(const BlockArgs& a, const AttendShape& shape, const float* q, size_t q_row, float* out, size_t out_row) {
  // Units: (query tile, head); tiles never cross sequences.
  struct Tile {
    uint32_t row, n, first;  // first row, queries, position of the first
    const KvCache* kv;
  };
  std::vector<Tile> tiles;
  for (const SeqRows& sq : a.seqs) {
    for (uint32_t i = 0; i < sq.n; i += kQueryTile) tiles.push_back({sq.row0 + i, std::min(kQueryTile, sq.n - i), sq.pos0 + i, sq.kv});
  }
  const QuantType cache = a.seqs.front().kv->type();
  const uint32_t n_head = a.hp.n_head;
  const int64_t units = static_cast<int64_t>(tiles.size()) * n_head;  // tile-major
  const int64_t grain = std::max<int64_t>(1, units / (static_cast<int64_t>(a.pool.size()) * 16));
  a.pool.parallel_for(
      units,
      [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const Tile& tl = tiles[static_cast<size_t>(u / n_head)];
          const uint32_t hh = static_cast<uint32_t>(u % n_head);
          const AttendArgs args{a, *tl.kv, cpu::kernels(), cache, shape};
          attend_tile(args, tl.first, tl.n, hh, q + static_cast<size_t>(tl.row) * q_row + hh * shape.hd_k, q_row,
                      out + static_cast<size_t>(tl.row) * out_row + hh * shape.hd_v, out_row);
        }
      },
      grain);
}

void attention_block(const BlockArgs& a, QkNorm qk_norm, RopeStyle rope_style) {
  const HParams& hp = a.hp;
  const LayerWeights& w = a.w;
  const size_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim();
  const uint32_t T = a.n_tokens;
  std::vector<float> h(T * E), q(T * Q), k(T * KV), v(T * KV), att(T * Q), out(T * E);
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rms_norm(a.x + t * E, a.v.attn_norm, hp.rms_eps, E, &h[t * E]);
  });
  trace_rows(a.trace, "attn_norm", a, h.data(), E);

  PackSet h_packs(h.data(), T, static_cast<int64_t>(E), &a.pool);
  // laguna: the output gate from the same normed input, softplus'd below.
  const size_t G = w.attn_gate.present() ? w.attn_gate.ne[1] : 0;
  std::vector<float> gate(T * G);
  // qwen3next / qwen35moe: attn_q gives each head's query then its output gate.
  std::vector<float> qg(w.q_gated ? T * 2 * Q : 0), qgate(w.q_gated ? T * Q : 0);
  std::vector<MatJob> qkv = {{&w.wq, 0, h_packs.get(w.wq.type), w.q_gated ? qg.data() : q.data(),
                              static_cast<int64_t>(w.q_gated ? 2 * Q : Q)},
                             {&w.wk, 0, h_packs.get(w.wk.type), k.data(), static_cast<int64_t>(KV)},
                             {&w.wv, 0, h_packs.get(w.wv.type), v.data(), static_cast<int64_t>(KV)}};
  if (G > 0) qkv.push_back({&w.attn_gate, 0, h_packs.get(w.attn_gate.type), gate.data(), static_cast<int64_t>(G)});
  matmul_jobs(qkv, a.pool);
  if (w.q_gated) {
    const size_t hd = hp.head_dim;
    for (size_t t = 0; t < T; ++t) {
      for (size_t hh = 0; hh < hp.n_head; ++hh) {
        const float* src = &qg[t * 2 * Q + hh * 2 * hd];
        std::copy(src, src + hd, &q[t * Q + hh * hd]);
        std::copy(src + hd, src + 2 * hd, &qgate[t * Q + hh * hd]);
      }
    }
  }
  add_bias(q.data(), a.v.bq, T, Q);
  add_bias(k.data(), a.v.bk, T, KV);
  add_bias(v.data(), a.v.bv, T, KV);

  // Per token: q/k norm, RoPE, K and V into its sequence's cache (distinct rows: tokens in
  // parallel).
  std::vector<uint32_t> pos_of(T);
  std::vector<KvCache*> kv_of(T);
  for (const SeqRows& sq : a.seqs) {
    for (uint32_t i = 0; i < sq.n; ++i) {
      pos_of[sq.row0 + i] = sq.pos0 + i;
      kv_of[sq.row0 + i] = sq.kv;
    }
  }
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_k(hp.n_rot / 2), sin_k(hp.n_rot / 2);
    for (int64_t t = t0; t < t1; ++t) {
      float* qt = &q[t * Q];
      float* kt = &k[t * KV];
      if (qk_norm == QkNorm::kPerHead) {
        for (uint32_t hh = 0; hh < hp.n_head; ++hh) rms_norm(qt + hh * hp.head_dim, a.v.q_norm, hp.rms_eps, hp.head_dim, qt + hh * hp.head_dim);
        for (uint32_t hh = 0; hh < hp.n_head_kv; ++hh) rms_norm(kt + hh * hp.head_dim, a.v.k_norm, hp.rms_eps, hp.head_dim, kt + hh * hp.head_dim);
      } else if (qk_norm == QkNorm::kFullWidth) {
        rms_norm(qt, a.v.q_norm, hp.rms_eps, Q, qt);
        rms_norm(kt, a.v.k_norm, hp.rms_eps, KV, kt);
      }
      const uint32_t pos = pos_of[t];
      rope_angles(hp, hp.n_rot, pos, cos_k.data(), sin_k.data());  // hp: this layer's view (SWA base)
      rope_apply(qt, hp.n_head, hp.head_dim, hp.n_rot, rope_style, cos_k.data(), sin_k.data());
      rope_apply(kt, hp.n_head_kv, hp.head_dim, hp.n_rot, rope_style, cos_k.data(), sin_k.data());
      kv_of[t]->store(a.layer, pos, kt, &v[t * KV]);
    }
  });
  trace_rows(a.trace, "Qcur", a, q.data(), Q);
  trace_rows(a.trace, "Kcur", a, k.data(), KV);
  trace_rows(a.trace, "Vcur", a, v.data(), KV);

  const QuantType cache = a.seqs.front().kv->type();
  const AttendShape shape{hp.head_dim, hp.head_dim, hp.n_head / hp.n_head_kv, static_cast<size_t>(*row_bytes(cache, hp.head_dim)),
                          static_cast<size_t>(*row_bytes(cache, hp.head_dim)), 1.0f / std::sqrt(static_cast<float>(hp.head_dim)),
                          hp.is_swa(a.layer) ? hp.n_swa : 0u, a.v.sinks.empty() ? nullptr : a.v.sinks.data()};
  attend_all(a, shape, q.data(), Q, att.data(), Q);
  trace_rows(a.trace, "kqv_out", a, att.data(), Q);
  if (w.q_gated) {
    for (size_t i = 0; i < T * Q; ++i) att[i] *= sigmoid(qgate[i]);
  }
  if (G > 0) {  // o <- o * softplus(gate): per head (broadcast over head_dim) or per element
    const size_t per = Q / G;
    for (size_t i = 0; i < T * Q; ++i) {
      att[i] *= softplus(gate[(i / Q) * G + (i % Q) / per]);
    }
  }

  matmul(w.wo, 0, att.data(), T, out.data(), a.pool);
  add_bias(out.data(), a.v.bo, T, E);
  trace_rows(a.trace, "attn_out", a, out.data(), E);
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
