// The Gated DeltaNet mixer of qwen3next / qwen35moe (layers.h; the math in
// ../shared/reference/moe_arch_facts_hybrid.md §1.7): projections, the short causal conv
// over each sequence's window, L2-normalised q / k, the per-head decay and step size, the
// delta rule (recurrent for short runs, chunked for prefill: model/delta_rule.h), the
// gated RMSNorm and the output projection.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/activations.h"
#include "model/attend.h"
#include "model/delta_rule.h"
#include "model/layers.h"
#include "model/linear.h"

namespace mt {
namespace {

// Runs shorter than this take the recurrent form (decode, speculative checks).
constexpr uint32_t kChunkedMinTokens = 4;


void l2_normalize(float* x, uint32_t n, float eps) {
  double sum = 0.0;
  for (uint32_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
  for (uint32_t i = 0; i < n; ++i) x[i] *= scale;
}

// Causal depthwise conv per sequence over [its conv state | its rows], then SiLU and the
// L2 norm of the q and k heads; the state keeps the last Kc - 1 raw rows.
// qkv: (T, C) the projections' rows; u: (T, C) out.
void causal_conv(const BlockArgs& a, const float* qkv, float* u) {
  const HParams& hp = a.hp;
  const uint32_t dk = hp.ssm_state, nk = hp.ssm_nk, Kc = hp.ssm_conv;
  const size_t C = hp.ssm_conv_dim();
  const std::vector<float>& wconv = a.v.ssm_conv1d;  // channel c's taps at c * Kc, oldest first
  for (const SeqRows& sq : a.seqs) {
    float* state = sq.kv->conv_state(a.layer);  // (Kc - 1, C), oldest first
    if (sq.kv->logs_run(sq.n)) {  // for rollback_recurrent
      RecurrentRunLog& log = sq.kv->run_log(a.layer);
      log.conv_before.assign(state, state + (Kc - 1) * C);
      log.conv_rows.assign(&qkv[sq.row0 * C], &qkv[(sq.row0 + sq.n) * C]);
    }
    auto raw = [&](int64_t i) -> const float* {  // row i of the sequence, i < 0 from the state
      return i >= 0 ? &qkv[(sq.row0 + i) * C] : state + (static_cast<int64_t>(Kc) - 1 + i) * static_cast<int64_t>(C);
    };
    maybe_parallel_for(a.pool, sq.n, kMinParallelRows, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* out = &u[(sq.row0 + i) * C];
        std::fill(out, out + C, 0.0f);
        for (uint32_t j = 0; j < Kc; ++j) {
          const float* x = raw(i - static_cast<int64_t>(Kc - 1) + j);
          for (size_t c = 0; c < C; ++c) out[c] += wconv[c * Kc + j] * x[c];
        }
        for (size_t c = 0; c < C; ++c) out[c] = silu(out[c]);
        for (uint32_t hh = 0; hh < 2 * nk; ++hh) l2_normalize(out + hh * dk, dk, hp.rms_eps);  // q and k heads
      }
    });
    // New state: the last Kc - 1 rows of [state | rows].
    std::vector<float> next((Kc - 1) * C);
    for (uint32_t j = 0; j < Kc - 1; ++j) {
      const float* x = raw(static_cast<int64_t>(sq.n) - static_cast<int64_t>(Kc - 1) + j);
      std::copy(x, x + C, &next[j * C]);
    }
    std::copy(next.begin(), next.end(), state);
  }
}

// The delta rule per (sequence, value head) over u's q / k / v heads, the decays g and
// step sizes beta ((T, nv) each) into o (T, V); value head hh reads key head kappa(hh).
void delta_rule_heads(const BlockArgs& a, const float* u, const float* gdecay, const float* beta, float* o) {
  const HParams& hp = a.hp;
  const uint32_t T = a.n_tokens, dk = hp.ssm_state, nk = hp.ssm_nk, nv = hp.ssm_nv;
  const size_t C = hp.ssm_conv_dim(), KD = hp.ssm_key_dim(), V = hp.ssm_value_dim();
  const uint32_t r = nv / nk;
  const int64_t units = static_cast<int64_t>(a.seqs.size()) * nv;
  const uint64_t work = static_cast<uint64_t>(T) * nv * dk * dk;
  for (const SeqRows& sq : a.seqs) {
    if (!sq.kv->logs_run(sq.n)) continue;  // for rollback_recurrent: the state before, the run's inputs
    RecurrentRunLog& log = sq.kv->run_log(a.layer);
    const float* state = sq.kv->delta_state(a.layer);
    log.delta_before.assign(state, state + static_cast<size_t>(nv) * dk * dk);
    log.delta_rows.assign(&u[sq.row0 * C], &u[(sq.row0 + sq.n) * C]);
    log.gdecay.assign(&gdecay[sq.row0 * nv], &gdecay[(sq.row0 + sq.n) * nv]);
    log.beta.assign(&beta[sq.row0 * nv], &beta[(sq.row0 + sq.n) * nv]);
  }
  auto run_unit = [&](int64_t unit) {
    const SeqRows& sq = a.seqs[static_cast<size_t>(unit / nv)];
    const auto hh = static_cast<uint32_t>(unit % nv);
    const uint32_t kh = hp.ssm_tiled ? hh % nk : hh / r;
    DeltaRun run;
    run.n = sq.n;
    run.dk = dk;
    run.dv = dk;
    run.q = &u[sq.row0 * C + kh * dk];
    run.k = &u[sq.row0 * C + KD + kh * dk];
    run.qk_stride = C;
    run.v = &u[sq.row0 * C + 2 * KD + hh * dk];
    run.v_stride = C;
    run.g = &gdecay[sq.row0 * nv + hh];
    run.beta = &beta[sq.row0 * nv + hh];
    run.gb_stride = nv;
    run.scale = 1.0f / std::sqrt(static_cast<float>(dk));
    run.out = &o[sq.row0 * V + hh * dk];
    run.out_stride = V;
    float* state = sq.kv->delta_state(a.layer) + static_cast<size_t>(hh) * dk * dk;
    if (sq.n >= kChunkedMinTokens) delta_rule_chunked(run, state);
    else delta_rule_recurrent(run, state);
  };
  if (units > 1 && work >= (1u << 16)) {
    a.pool.parallel_for(units, [&](int64_t u0, int64_t u1) {
      for (int64_t i = u0; i < u1; ++i) run_unit(i);
    }, 1);
  } else {
    for (int64_t i = 0; i < units; ++i) run_unit(i);
  }

}

}  // namespace

Status rollback_recurrent(const HParams& hp, KvCache& kv, uint32_t n_pos) {
  const uint32_t pos0 = kv.logged_pos0(), n = kv.logged_n();
  if (n == 0 || kv.recurrent_pos() != pos0 + n || n_pos < pos0 || n_pos > pos0 + n) {
    return invalid_argument("this model's recurrent (Gated DeltaNet) state holds " + std::to_string(kv.recurrent_pos()) +
                            " positions and cannot go back to " + std::to_string(n_pos) +
                            (n == 0 ? std::string(": no logged run to cut short") :
                                      ": only into its last run, positions " + std::to_string(pos0) + " to " + std::to_string(pos0 + n)));
  }
  const uint32_t keep = n_pos - pos0;
  const uint32_t dk = hp.ssm_state, nk = hp.ssm_nk, nv = hp.ssm_nv, Kc = hp.ssm_conv;
  const size_t C = hp.ssm_conv_dim(), KD = hp.ssm_key_dim();
  std::vector<float> out(dk);  // the replay's outputs are not needed
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.is_recurrent(l) || keep == n) continue;
    const RecurrentRunLog& log = kv.run_log(l);
    // The conv window: the last Kc - 1 rows of [the state before | the first `keep` rows].
    float* conv = kv.conv_state(l);
    for (uint32_t j = 0; j + 1 < Kc; ++j) {
      const int64_t i = static_cast<int64_t>(keep) - static_cast<int64_t>(Kc - 1) + j;
      const float* row = i >= 0 ? &log.conv_rows[static_cast<size_t>(i) * C]
                                : &log.conv_before[static_cast<size_t>(static_cast<int64_t>(Kc - 1) + i) * C];
      std::copy(row, row + C, conv + j * C);
    }
    // The delta state: from before the run, then its first `keep` tokens again.
    float* delta = kv.delta_state(l);
    std::copy(log.delta_before.begin(), log.delta_before.end(), delta);
    for (uint32_t hh = 0; hh < nv && keep > 0; ++hh) {
      const uint32_t kh = hp.ssm_tiled ? hh % nk : hh / (nv / nk);
      DeltaRun run;
      run.n = keep;
      run.dk = dk;
      run.dv = dk;
      run.q = &log.delta_rows[kh * dk];
      run.k = &log.delta_rows[KD + kh * dk];
      run.qk_stride = C;
      run.v = &log.delta_rows[2 * KD + hh * dk];
      run.v_stride = C;
      run.g = &log.gdecay[hh];
      run.beta = &log.beta[hh];
      run.gb_stride = nv;
      run.scale = 1.0f / std::sqrt(static_cast<float>(dk));
      run.out = out.data();
      run.out_stride = 0;
      delta_rule_recurrent(run, delta + static_cast<size_t>(hh) * dk * dk);
    }
  }
  kv.set_recurrent_pos(n_pos);
  kv.set_logged_run(0, 0);
  return {};
}

void gated_delta_net_block(const BlockArgs& a) {
  const HParams& hp = a.hp;
  const LayerWeights& w = a.w;
  const uint32_t T = a.n_tokens, dk = hp.ssm_state, nk = hp.ssm_nk, nv = hp.ssm_nv;
  const size_t E = hp.n_embd, C = hp.ssm_conv_dim(), V = hp.ssm_value_dim();
  std::vector<float> h(T * E);
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rms_norm(a.x + t * E, a.v.attn_norm, hp.rms_eps, E, &h[t * E]);
  });
  trace_rows(a.trace, "attn_norm", a, h.data(), E);

  // Projections: qkv (T, C) before the conv, z (T, V), b and a (T, nv) each.
  std::vector<float> qkv(T * C), z(T * V), b(T * nv), alpha(T * nv), ba;
  PackSet packs(h.data(), T, static_cast<int64_t>(E), &a.pool);
  std::vector<MatJob> jobs = {{&w.ssm_qkv, 0, packs.get(w.ssm_qkv.type), qkv.data(), static_cast<int64_t>(C)},
                              {&w.ssm_z, 0, packs.get(w.ssm_z.type), z.data(), static_cast<int64_t>(V)}};
  if (w.ssm_ba.present()) {
    ba.resize(T * 2 * nv);
    jobs.push_back({&w.ssm_ba, 0, packs.get(w.ssm_ba.type), ba.data(), static_cast<int64_t>(2 * nv)});
  } else {
    jobs.push_back({&w.ssm_beta, 0, packs.get(w.ssm_beta.type), b.data(), static_cast<int64_t>(nv)});
    jobs.push_back({&w.ssm_alpha, 0, packs.get(w.ssm_alpha.type), alpha.data(), static_cast<int64_t>(nv)});
  }
  matmul_jobs(jobs, a.pool);
  if (!ba.empty()) {  // qwen3next: per key head g, [b of its r value heads | a of the same heads]
    const uint32_t r = nv / nk;
    for (uint32_t t = 0; t < T; ++t) {
      for (uint32_t hh = 0; hh < nv; ++hh) {
        const uint32_t g = hh / r, i = hh % r;
        b[t * nv + hh] = ba[t * 2 * nv + g * 2 * r + i];
        alpha[t * nv + hh] = ba[t * 2 * nv + g * 2 * r + r + i];
      }
    }
  }

  // Gates: beta = sigmoid(b), g = ssm_a * softplus(a + dt_bias) (<= 0: the log decay).
  std::vector<float> beta(T * nv), gdecay(T * nv);
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t hh = 0; hh < nv; ++hh) {
      beta[t * nv + hh] = sigmoid(b[t * nv + hh]);
      gdecay[t * nv + hh] = a.v.ssm_a[hh] * softplus(alpha[t * nv + hh] + a.v.ssm_dt[hh]);
    }
  }

  std::vector<float> u(T * C);  // (T, C) the conv's output: q heads | k heads | v heads
  causal_conv(a, qkv.data(), u.data());
  std::vector<float> o(T * V);  // (T, V) the delta rule's output per value head
  delta_rule_heads(a, u.data(), gdecay.data(), beta.data(), o.data());

  // Gated RMSNorm per value head: rms_norm(o_h) * ssm_norm * silu(z_h); then ssm_out.
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (uint32_t hh = 0; hh < nv; ++hh) {
        float* oh = &o[t * V + hh * dk];
        rms_norm(oh, a.v.ssm_norm, hp.rms_eps, dk, oh);
        const float* zh = &z[t * V + hh * dk];
        for (uint32_t j = 0; j < dk; ++j) oh[j] *= silu(zh[j]);
      }
    }
  });
  std::vector<float> out(T * E);
  matmul(w.ssm_out, 0, o.data(), T, out.data(), a.pool);
  trace_rows(a.trace, "linear_attn_out", a, out.data(), E);
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
