#include "model/expert_rows.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "model/activations.h"
#include "model/layers.h"
#include "model/linear.h"

namespace mt {

void swiglu(const float* g, float* u, size_t n) {
  if (g == nullptr) {
    for (size_t i = 0; i < n; ++i) u[i] = silu(u[i]);
  } else {
    for (size_t i = 0; i < n; ++i) u[i] = silu(g[i]) * u[i];
  }
}

namespace {

// gpt-oss's expert activation: g' = min(g, 7), u' = clamp(u, -7, 7),
// u <- g' / (1 + exp(-1.702 g')) * (u' + 1).
void swiglu_oai(const float* g, float* u, size_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (size_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], kLimit);
    const float y = std::clamp(u[i], -kLimit, kLimit);
    u[i] = x / (1.0f + std::exp(kAlpha * (-x))) * (y + 1.0f);
  }
}

// Adds row `e` of a (n, n_expert) F32 bias tensor to `rows` rows of n floats.
void add_expert_bias(const Tensor& b, uint32_t e, float* y, size_t rows, size_t n) {
  if (!b.present()) return;
  const float* v = reinterpret_cast<const float*>(b.row(e));
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < n; ++i) y[r * n + i] += v[i];
  }
}

}  // namespace

void expert_rows(const LayerWeights& w, std::span<const ExpertRun> runs, size_t r0, size_t r1, bool shared,
                 const ExpertRows& b, ThreadPool& pool) {
  if (r1 == r0 && !shared) return;
  const size_t E = b.E, n_ff = b.n_ff, n = r1 - r0;
  const bool gated = w.gate_exps.present();
  PackSet in_packs(b.in + r0 * E, static_cast<int64_t>(n), static_cast<int64_t>(E), &pool);
  PackSet h_packs(b.h, b.T, static_cast<int64_t>(E), &pool);
  std::vector<MatJob> jobs;
  for (const ExpertRun& r : runs) {
    const int64_t t0 = static_cast<int64_t>(r.row0 - r0);
    jobs.push_back({r.up, r.matrix, in_packs.get(r.up->type), b.u + r.row0 * n_ff, static_cast<int64_t>(n_ff), t0, r.n});
    if (gated) jobs.push_back({r.gate, r.matrix, in_packs.get(r.gate->type), b.g + r.row0 * n_ff, static_cast<int64_t>(n_ff), t0, r.n});
  }
  if (shared) {
    jobs.push_back({&w.shexp_up, 0, h_packs.get(w.shexp_up.type), b.u_sh, static_cast<int64_t>(b.n_ff_sh)});
    jobs.push_back({&w.shexp_gate, 0, h_packs.get(w.shexp_gate.type), b.g_sh, static_cast<int64_t>(b.n_ff_sh)});
  }
  matmul_jobs(jobs, pool);
  for (const ExpertRun& r : runs) {  // gpt-oss: per-expert biases on gate and up
    add_expert_bias(w.up_exps_b, r.expert, b.u + r.row0 * n_ff, r.n, n_ff);
    add_expert_bias(w.gate_exps_b, r.expert, b.g + r.row0 * n_ff, r.n, n_ff);
  }
  maybe_parallel_for(pool, static_cast<int64_t>(n), kMinParallelRows, [&](int64_t i0, int64_t i1) {
    const size_t at = (r0 + static_cast<size_t>(i0)) * n_ff;
    if (w.swiglu_oai) {
      swiglu_oai(b.g + at, b.u + at, static_cast<size_t>(i1 - i0) * n_ff);
    } else {
      swiglu(gated ? b.g + at : nullptr, b.u + at, static_cast<size_t>(i1 - i0) * n_ff);
    }
  });
  if (shared) {
    maybe_parallel_for(pool, b.T, kMinParallelRows, [&](int64_t t0, int64_t t1) {
      swiglu(b.g_sh + t0 * b.n_ff_sh, b.u_sh + t0 * b.n_ff_sh, (t1 - t0) * b.n_ff_sh);
    });
  }
  PackSet act_packs(b.u + r0 * n_ff, static_cast<int64_t>(n), static_cast<int64_t>(n_ff), &pool);
  PackSet sh_packs(b.u_sh, b.T, static_cast<int64_t>(b.n_ff_sh), &pool);
  jobs.clear();
  for (const ExpertRun& r : runs) {
    jobs.push_back({r.down, r.matrix, act_packs.get(r.down->type), b.d + r.row0 * E, static_cast<int64_t>(E),
                    static_cast<int64_t>(r.row0 - r0), r.n});
  }
  if (shared) jobs.push_back({&w.shexp_down, 0, sh_packs.get(w.shexp_down.type), b.d_sh, static_cast<int64_t>(E)});
  matmul_jobs(jobs, pool);
  for (const ExpertRun& r : runs) add_expert_bias(w.down_exps_b, r.expert, b.d + r.row0 * E, r.n, E);
}

void expert_outputs(const LayerWeights& w, const float* h, uint32_t n_tokens, size_t n_embd,
                    std::span<const ExpertJob> jobs, float* out, ThreadPool& pool) {
  const size_t E = n_embd, S = jobs.size();
  if (S == 0) return;
  const size_t n_ff = w.up_exps.ne[1];
  // Jobs ordered by expert (stable: tokens keep their order), one run per expert.
  std::vector<uint32_t> order(S);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t i, uint32_t j) { return jobs[i].expert < jobs[j].expert; });
  std::vector<ExpertRun> runs;
  for (uint32_t r = 0; r < S; ++r) {
    const uint32_t e = jobs[order[r]].expert;
    MT_CHECK(jobs[order[r]].token < n_tokens && e < w.up_exps.ne[2]);
    if (runs.empty() || runs.back().matrix != e) runs.push_back({&w.gate_exps, &w.up_exps, &w.down_exps, e, r, 0, e});
    ++runs.back().n;
  }
  std::vector<float> in(S * E), g(S * n_ff), u(S * n_ff), d(S * E);  // rows in run order
  for (size_t r = 0; r < S; ++r) std::copy_n(&h[jobs[order[r]].token * E], E, &in[r * E]);
  const ExpertRows rows{in.data(), g.data(), u.data(), d.data(), h, nullptr, nullptr, nullptr, E, n_ff, 0, n_tokens};
  expert_rows(w, runs, 0, S, false, rows, pool);
  for (size_t r = 0; r < S; ++r) std::copy_n(&d[r * E], E, &out[order[r] * E]);
}

}  // namespace mt
