// Multi-head latent attention (deepseek2's MLA layout), the absorbed form for every batch
// size: the cache holds one latent row per position and no per-head K or V.
//
// Per token (h = attn_norm(x), n_embd):
//   q      = wq_b . rms(wq_a . h) or wq . h        (n_head, mla_k) = per head [nope | rope]
//   c      = wkv_a . h                             (kv_lora_rank + n_rot) = [latent | k_pe]
//   cache  <- [rms(latent) | rope(k_pe)]           one row, read as K (all of it) and V (latent)
//   Q_h    = [wk_b[h] . q_nope_h | rope(q_pe_h)]   (kv_lora_rank + n_rot): q absorbed into latent space
//   o_h    = softmax(Q_h . K / sqrt(mla_k)) . V    (kv_lora_rank): MQA, every head on the one row
//   out    = wo . [wv_b[h] . o_h]_h                (n_head * mla_v) -> n_embd
// The per-head products (wk_b, wv_b: 3-D tensors, one matrix per head) run as one
// matmul_jobs each over head-major packs. Numerics follow llama.cpp's graph: the same
// roundings of q (to the cache type) and of the probabilities (to F16) as attention.cpp.
#include <cmath>

#include "model/attend.h"
#include "model/layers.h"
#include "model/linear.h"
#include "quant/reference.h"

namespace mt {

// llama.cpp's deepseek2 scale: YaRN's magnitude (the rope's own factor undone) times the
// yarn_log_multiplier term, squared, over sqrt(mla_k); 1 / sqrt(mla_k) without YaRN.
float mla_kq_scale(const HParams& hp) {
  const float inv = std::log(1.0f / hp.rope_freq_scale);
  const float attn_factor_org = hp.rope_attn_factor * (1.0f + 0.1f * inv);
  const float mscale = attn_factor_org * (1.0f + 0.1f * hp.yarn_log_mul * inv);
  return mscale * mscale / std::sqrt(static_cast<float>(hp.mla_k));
}

void mla_attention_block(const BlockArgs& a) {
  const HParams& hp = a.hp;
  const LayerWeights& w = a.w;
  const size_t E = hp.n_embd, H = hp.n_head, R = hp.kv_lora_rank, P = hp.n_rot;
  const size_t nope = hp.mla_k - P, QK = hp.mla_k, L = R + P;  // L: latent row = one cache row
  const uint32_t T = a.n_tokens;
  std::vector<float> h(T * E), q(T * H * QK), c(T * L);
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rms_norm(a.x + t * E, a.v.attn_norm, hp.rms_eps, E, &h[t * E]);
  });
  trace_rows(a.trace, "attn_norm", a, h.data(), E);

  // q (through the low-rank pair when the model has one) and the latent row.
  PackSet h_packs(h.data(), T, static_cast<int64_t>(E), &a.pool);
  std::vector<float> qa;
  if (w.wq_a.present()) {
    qa.resize(T * hp.q_lora_rank);
    const MatJob jobs[] = {{&w.wq_a, 0, h_packs.get(w.wq_a.type), qa.data(), static_cast<int64_t>(hp.q_lora_rank)},
                           {&w.wkv_a, 0, h_packs.get(w.wkv_a.type), c.data(), static_cast<int64_t>(L)}};
    matmul_jobs(jobs, a.pool);
    for (uint32_t t = 0; t < T; ++t) rms_norm(&qa[t * hp.q_lora_rank], a.v.q_a_norm, hp.rms_eps, hp.q_lora_rank, &qa[t * hp.q_lora_rank]);
    matmul(w.wq_b, 0, qa.data(), T, q.data(), a.pool);
  } else {
    const MatJob jobs[] = {{&w.wq, 0, h_packs.get(w.wq.type), q.data(), static_cast<int64_t>(H * QK)},
                           {&w.wkv_a, 0, h_packs.get(w.wkv_a.type), c.data(), static_cast<int64_t>(L)}};
    matmul_jobs(jobs, a.pool);
  }

  // RoPE on q_pe and k_pe, the latent normed, the row into the cache; q_nope head-major
  // (H, T, nope) for the per-head absorption.
  std::vector<float> q_nope(H * T * nope), q_full(T * H * L);
  for (const SeqRows& sq : a.seqs) {
    std::vector<float> cos_k(P / 2), sin_k(P / 2);
    for (uint32_t i = 0; i < sq.n; ++i) {
      const uint32_t t = sq.row0 + i, pos = sq.pos0 + i;
      rope_angles(hp, static_cast<uint32_t>(P), pos, cos_k.data(), sin_k.data());
      float* ct = &c[t * L];
      rms_norm(ct, a.v.kv_a_norm, hp.rms_eps, static_cast<int64_t>(R), ct);
      rope_apply(ct + R, 1, static_cast<uint32_t>(P), static_cast<uint32_t>(P), RopeStyle::kNorm, cos_k.data(), sin_k.data());
      sq.kv->store(a.layer, pos, ct, nullptr);
      for (size_t hh = 0; hh < H; ++hh) {
        float* qh = &q[(t * H + hh) * QK];
        rope_apply(qh + nope, 1, static_cast<uint32_t>(P), static_cast<uint32_t>(P), RopeStyle::kNorm, cos_k.data(), sin_k.data());
        std::copy_n(qh, nope, &q_nope[(hh * T + t) * nope]);
        std::copy_n(qh + nope, P, &q_full[(t * H + hh) * L + R]);
      }
    }
  }
  trace_rows(a.trace, "Kcur", a, c.data(), L);
  {
    PackSet packs(q_nope.data(), static_cast<int64_t>(H * T), static_cast<int64_t>(nope), &a.pool);
    std::vector<MatJob> jobs;
    for (size_t hh = 0; hh < H; ++hh) {
      jobs.push_back({&w.wk_b, hh, packs.get(w.wk_b.type), &q_full[hh * L], static_cast<int64_t>(H * L),
                      static_cast<int64_t>(hh * T), static_cast<int64_t>(T)});
    }
    matmul_jobs(jobs, a.pool);
  }
  trace_rows(a.trace, "Qcur", a, q_full.data(), H * L);

  // MQA over the latent rows: every head reads the one cache row; the value is its latent part.
  const QuantType cache = a.seqs.front().kv->type();
  const AttendShape shape{static_cast<uint32_t>(L), static_cast<uint32_t>(R), hp.n_head,
                          static_cast<size_t>(*row_bytes(cache, L)), 0,
                          mla_kq_scale(hp)};
  std::vector<float> o(T * H * R);
  attend_all(a, shape, q_full.data(), H * L, o.data(), H * R);

  // Per head: latent result -> value dims (head-major pack), then the output projection.
  std::vector<float> o_heads(H * T * R), v(T * H * hp.mla_v), out(T * E);
  for (uint32_t t = 0; t < T; ++t) {
    for (size_t hh = 0; hh < H; ++hh) std::copy_n(&o[(t * H + hh) * R], R, &o_heads[(hh * T + t) * R]);
  }
  {
    PackSet packs(o_heads.data(), static_cast<int64_t>(H * T), static_cast<int64_t>(R), &a.pool);
    std::vector<MatJob> jobs;
    for (size_t hh = 0; hh < H; ++hh) {
      jobs.push_back({&w.wv_b, hh, packs.get(w.wv_b.type), &v[hh * hp.mla_v], static_cast<int64_t>(H * hp.mla_v),
                      static_cast<int64_t>(hh * T), static_cast<int64_t>(T)});
    }
    matmul_jobs(jobs, a.pool);
  }
  trace_rows(a.trace, "kqv_out", a, v.data(), H * hp.mla_v);
  matmul(w.wo, 0, v.data(), T, out.data(), a.pool);
  trace_rows(a.trace, "attn_out", a, out.data(), E);
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
