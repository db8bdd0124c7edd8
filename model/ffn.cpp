// The FFN sub-blocks: routed experts (with the shared expert) and the dense SwiGLU.
//
// Routed experts, for a batch of T tokens with top-k K: the T*K (token, rank) slots are
// counting-sorted by expert, so each active expert's tokens are one contiguous run of
// the gathered input. Then three pool hand-offs for the whole layer: gate and up of every
// active expert (and of the shared expert) as one matmul_jobs call, SwiGLU, all the down
// matrices as a second call; the weighted sum in rank order follows.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "model/layers.h"
#include "model/linear.h"

namespace mt {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// u = silu(g) * u (gated) or silu(u) (ungated: g empty).
void swiglu(const float* g, float* u, size_t n) {
  if (g == nullptr) {
    for (size_t i = 0; i < n; ++i) u[i] = silu(u[i]);
  } else {
    for (size_t i = 0; i < n; ++i) u[i] = silu(g[i]) * u[i];
  }
}

// A per-thread buffer of at least n floats, reused across calls (no zeroing).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

void moe_block(const BlockArgs& a, const MoeMath& math) {
  const HParams& hp = a.hp;
  const LayerWeights& w = a.w;
  const size_t E = hp.n_embd;
  const uint32_t T = a.n_tokens, K = hp.n_expert_used, X = hp.n_expert;
  const size_t n_ff = w.up_exps.ne[1];
  thread_local std::vector<float> h_buf, probs_buf, in_buf, g_buf, u_buf, d_buf, out_buf;
  float* h = scratch(h_buf, T * E);                 // (T, n_embd) normed input
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rms_norm(a.x + t * E, a.v.ffn_norm, hp.rms_eps, E, &h[t * E]);
  });
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_norm", a.layer, a.pos0 + t, {&h[t * E], E});

  // Router: softmax over all experts, top-k by probability, weights from the same probs.
  float* probs = scratch(probs_buf, T * X);         // (T, n_expert)
  PackSet h_packs(h, T, static_cast<int64_t>(E), &a.pool);
  {
    const MatJob router{&w.router, 0, h_packs.get(w.router.type), probs, static_cast<int64_t>(X)};
    matmul_jobs({&router, 1}, a.pool);
  }
  std::vector<int32_t> selected(T * K);
  std::vector<float> weights(T * K);
  std::vector<int32_t> order(X);
  for (uint32_t t = 0; t < T; ++t) {
    float* p = &probs[t * X];
    softmax(p, X);
    if (a.trace) a.trace->tensor("ffn_moe_probs", a.layer, a.pos0 + t, {p, X});
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t i, int32_t j) { return p[i] > p[j] || (p[i] == p[j] && i < j); });
    float sum = 0.0f;
    for (uint32_t i = 0; i < K; ++i) {
      selected[t * K + i] = order[i];
      weights[t * K + i] = p[order[i]];
      sum += p[order[i]];
    }
    if (math.renormalize) {
      sum = std::max(sum, 6.103515625e-5f);
      for (uint32_t i = 0; i < K; ++i) weights[t * K + i] /= sum;
    }
    if (a.trace) a.trace->routing(a.layer, a.pos0 + t, {&selected[t * K], K}, {&weights[t * K], K});
  }

  // Counting sort of the slots (token * K + rank) by expert: expert e's slots are
  // sorted[first[e] .. first[e + 1]); row_of[slot] is the slot's row in that order.
  std::vector<uint32_t> first(X + 1, 0), sorted(T * K), row_of(T * K);
  for (uint32_t s = 0; s < T * K; ++s) ++first[static_cast<uint32_t>(selected[s]) + 1];
  for (uint32_t e = 0; e < X; ++e) first[e + 1] += first[e];
  {
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (uint32_t s = 0; s < T * K; ++s) {
      const uint32_t r = fill[static_cast<uint32_t>(selected[s])]++;
      sorted[r] = s;
      row_of[s] = r;
    }
  }
  const size_t S = static_cast<size_t>(T) * K;
  float* in = scratch(in_buf, S * E);               // (T*K, n_embd) gathered, expert-major
  maybe_parallel_for(a.pool, static_cast<int64_t>(S), kMinParallelRows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(&h[sorted[r] / K * E], E, &in[r * E]);
  });

  const bool shared = w.shexp_up.present();
  const size_t n_ff_sh = shared ? w.shexp_up.ne[1] : 0;
  const bool gated = w.gate_exps.present();
  float* g = scratch(g_buf, S * n_ff + T * n_ff_sh);  // gate outputs: routed rows, then shared
  float* u = scratch(u_buf, S * n_ff + T * n_ff_sh);  // up outputs (then the SwiGLU), same rows
  float* g_sh = g + S * n_ff;
  float* u_sh = u + S * n_ff;

  PackSet in_packs(in, static_cast<int64_t>(S), static_cast<int64_t>(E), &a.pool);
  std::vector<MatJob> jobs;
  for (uint32_t e = 0; e < X; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    const int64_t t0 = first[e];
    jobs.push_back({&w.up_exps, e, in_packs.get(w.up_exps.type), u + t0 * n_ff, static_cast<int64_t>(n_ff), t0, n});
    if (gated) jobs.push_back({&w.gate_exps, e, in_packs.get(w.gate_exps.type), g + t0 * n_ff, static_cast<int64_t>(n_ff), t0, n});
  }
  if (shared) {
    jobs.push_back({&w.shexp_up, 0, h_packs.get(w.shexp_up.type), u_sh, static_cast<int64_t>(n_ff_sh)});
    jobs.push_back({&w.shexp_gate, 0, h_packs.get(w.shexp_gate.type), g_sh, static_cast<int64_t>(n_ff_sh)});
  }
  matmul_jobs(jobs, a.pool);
  maybe_parallel_for(a.pool, static_cast<int64_t>(S), kMinParallelRows, [&](int64_t r0, int64_t r1) {
    swiglu(gated ? g + r0 * n_ff : nullptr, u + r0 * n_ff, (r1 - r0) * n_ff);
  });
  if (shared) {
    maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
      swiglu(g_sh + t0 * n_ff_sh, u_sh + t0 * n_ff_sh, (t1 - t0) * n_ff_sh);
    });
  }

  float* d = scratch(d_buf, S * E + T * E);         // down outputs: routed rows, then shared
  float* d_sh = d + S * E;
  PackSet act_packs(u, static_cast<int64_t>(S), static_cast<int64_t>(n_ff), &a.pool);
  PackSet sh_packs(u_sh, T, static_cast<int64_t>(n_ff_sh), &a.pool);
  jobs.clear();
  for (uint32_t e = 0; e < X; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    const int64_t t0 = first[e];
    jobs.push_back({&w.down_exps, e, act_packs.get(w.down_exps.type), d + t0 * E, static_cast<int64_t>(E), t0, n});
  }
  if (shared) jobs.push_back({&w.shexp_down, 0, sh_packs.get(w.shexp_down.type), d_sh, static_cast<int64_t>(E)});
  matmul_jobs(jobs, a.pool);

  // Weighted sum in rank order, then the gated shared expert.
  float* out = scratch(out_buf, T * E);
  maybe_parallel_for(a.pool, T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = &out[t * E];
      std::fill(o, o + E, 0.0f);
      for (uint32_t i = 0; i < K; ++i) {
        const float wt = weights[t * K + i];
        const float* dr = &d[row_of[t * K + i] * E];
        for (size_t j = 0; j < E; ++j) o[j] += dr[j] * wt;
      }
      if (shared) {
        double z = 0.0;
        for (size_t j = 0; j < E; ++j) z += static_cast<double>(a.v.shexp_gate_inp[j]) * h[t * E + j];
        const float gate = 1.0f / (1.0f + std::exp(-static_cast<float>(z)));
        for (size_t j = 0; j < E; ++j) o[j] += d_sh[t * E + j] * gate;
      }
    }
  });
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos0 + t, {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

void dense_ffn_block(const BlockArgs& a) {
  const HParams& hp = a.hp;
  const LayerWeights& w = a.w;
  const size_t E = hp.n_embd;
  const uint32_t T = a.n_tokens;
  const size_t n_ff = w.ffn_up.ne[1];
  std::vector<float> h(T * E), g(T * n_ff), u(T * n_ff), out(T * E);
  for (uint32_t t = 0; t < T; ++t) rms_norm(a.x + t * E, a.v.ffn_norm, hp.rms_eps, E, &h[t * E]);
  PackSet h_packs(h.data(), T, static_cast<int64_t>(E), &a.pool);
  std::vector<MatJob> jobs{{&w.ffn_up, 0, h_packs.get(w.ffn_up.type), u.data(), static_cast<int64_t>(n_ff)}};
  if (w.ffn_gate.present()) jobs.push_back({&w.ffn_gate, 0, h_packs.get(w.ffn_gate.type), g.data(), static_cast<int64_t>(n_ff)});
  matmul_jobs(jobs, a.pool);
  swiglu(w.ffn_gate.present() ? g.data() : nullptr, u.data(), T * n_ff);
  matmul(w.ffn_down, 0, u.data(), T, out.data(), a.pool);
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos0 + t, {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
