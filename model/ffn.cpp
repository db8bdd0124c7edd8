// The FFN sub-blocks: routed experts (with the shared expert) and the dense SwiGLU.
//
// Routed experts, for a batch of T tokens with top-k K: the T*K (token, rank) slots are
// counting-sorted by expert, so each active expert's tokens are one contiguous run of
// the gathered input. Then three pool hand-offs for the whole layer: gate and up of every
// active expert (and of the shared expert) as one matmul_jobs call, SwiGLU, all the down
// matrices as a second call; the weighted sum in rank order follows. Offloaded (a
// MoeOffload in BlockArgs), the scheduler splits the active experts between the device
// and the CPU; the two sides run the same steps on their own rows at the same time, and
// every expert's rows come out bit-identical to the plain path.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <span>

#include "core/check.h"
#include "model/activations.h"
#include "model/layers.h"
#include "model/linear.h"
#include "model/offload.h"

namespace mt {
namespace {


// u = silu(g) * u (gated) or silu(u) (ungated: g empty).
void swiglu(const float* g, float* u, size_t n) {
  if (g == nullptr) {
    for (size_t i = 0; i < n; ++i) u[i] = silu(u[i]);
  } else {
    for (size_t i = 0; i < n; ++i) u[i] = silu(g[i]) * u[i];
  }
}

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

// A per-thread buffer of at least n floats, reused across calls (no zeroing).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}


// Expert runs: one active expert's rows [row0, row0 + n) of the gathered input, and the
// tensors its gate, up and down come from (the layer's, or one-matrix views of a slot).
struct ExpertRun {
  const Tensor* gate;
  const Tensor* up;
  const Tensor* down;
  uint64_t matrix;
  uint32_t row0, n;
  uint32_t expert = 0;  // the expert id (matrix is 0 when the run reads a device slot view)
};

// The buffers of one MoE layer-step (rows as in moe_block).
struct ExpertRows {
  const float* in;
  float *g, *u, *d;
  const float* h;
  float *g_sh, *u_sh, *d_sh;
  size_t E, n_ff, n_ff_sh;
  uint32_t T;
};

// Gate and up of the runs (rows [r0, r1), contiguous) and of the shared expert as one
// pool hand-off, the SwiGLU, then all their downs as a second.
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

}  // namespace

MoeMath moe_math(const HParams& hp) {
  return {hp.gating, hp.renormalize, hp.expert_weights_scale, hp.n_expert_groups, hp.n_group_used};
}

void route_token(const MoeMath& math, float* p, uint32_t X, uint32_t K, const std::vector<float>& bias,
                 int32_t* selected, float* weights, std::vector<float>& sel) {
  if (math.gating == ExpertGating::kSoftmax) {
    softmax(p, X);
  } else if (math.gating == ExpertGating::kSigmoid) {
    for (uint32_t e = 0; e < X; ++e) p[e] = sigmoid(p[e]);
  }  // kSoftmaxOfSelected: the raw logits choose
  sel.assign(p, p + X);                            // selection scores
  if (!bias.empty()) for (uint32_t e = 0; e < X; ++e) sel[e] += bias[e];
  auto before = [&](uint32_t i, uint32_t j) { return sel[i] > sel[j] || (sel[i] == sel[j] && i < j); };
  if (math.n_groups > 1) {
    // A group's score is the sum of its two best selection scores; the other groups' experts
    // are out of the running.
    const uint32_t G = math.n_groups, per = X / G;
    std::vector<float> group_score(G);
    for (uint32_t g = 0; g < G; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (uint32_t e = g * per; e < (g + 1) * per; ++e) {
        if (sel[e] > best) {
          second = best;
          best = sel[e];
        } else if (sel[e] > second) {
          second = sel[e];
        }
      }
      group_score[g] = best + second;
    }
    std::vector<uint32_t> groups(G);
    std::iota(groups.begin(), groups.end(), 0u);
    std::partial_sort(groups.begin(), groups.begin() + math.n_group_used, groups.end(), [&](uint32_t i, uint32_t j) {
      return group_score[i] > group_score[j] || (group_score[i] == group_score[j] && i < j);
    });
    std::vector<bool> keep(G, false);
    for (uint32_t i = 0; i < math.n_group_used; ++i) keep[groups[i]] = true;
    for (uint32_t e = 0; e < X; ++e) if (!keep[e / per]) sel[e] = -INFINITY;
  }
  std::vector<uint32_t> order(X);
  std::iota(order.begin(), order.end(), 0u);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), before);
  float sum = 0.0f;
  for (uint32_t i = 0; i < K; ++i) {
    selected[i] = static_cast<int32_t>(order[i]);
    weights[i] = p[order[i]];
    sum += p[order[i]];
  }
  if (math.gating == ExpertGating::kSoftmaxOfSelected) softmax(weights, K);
  if (math.renormalize) {
    sum = std::max(sum, 6.103515625e-5f);
    for (uint32_t i = 0; i < K; ++i) weights[i] /= sum;
  }
  if (math.scale != 1.0f) for (uint32_t i = 0; i < K; ++i) weights[i] *= math.scale;
}

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
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_norm", a.layer, a.pos(t), {&h[t * E], E});

  // Router: scores by the gating, top-k on the (biased, group-limited) selection scores,
  // weights from the unbiased scores.
  float* probs = scratch(probs_buf, T * X);         // (T, n_expert)
  PackSet h_packs(h, T, static_cast<int64_t>(E), &a.pool);
  {
    const MatJob router{&w.router, 0, h_packs.get(w.router.type), probs, static_cast<int64_t>(X)};
    matmul_jobs({&router, 1}, a.pool);
  }
  std::vector<int32_t> selected(T * K);
  std::vector<float> weights(T * K);
  std::vector<float> work;
  for (uint32_t t = 0; t < T; ++t) {
    float* p = &probs[t * X];
    if (!a.v.router_b.empty()) for (uint32_t e = 0; e < X; ++e) p[e] += a.v.router_b[e];
    route_token(math, p, X, K, a.v.exp_probs_b, &selected[t * K], &weights[t * K], work);
    if (a.trace) a.trace->tensor("ffn_moe_probs", a.layer, a.pos(t), {p, X});
    if (a.trace) a.trace->routing(a.layer, a.pos(t), {&selected[t * K], K}, {&weights[t * K], K});
  }

  // Row active: the active experts one after another (ascending id; offloaded: the
  // device's experts first, then the CPU's), each expert's slots (token * K + rank) one
  // contiguous run. row_of[slot] is the slot's row; sorted[row] the slot back.
  std::vector<uint32_t> count(X, 0);
  for (uint32_t s = 0; s < T * K; ++s) ++count[static_cast<uint32_t>(selected[s])];
  std::vector<uint32_t> active;                      // active experts in row active
  std::vector<Placement> placed;                    // parallel to active (offloaded)
  size_t n_device = 0;                              // the first n_device of active are the device's
  if (a.offload != nullptr) {
    std::vector<ExpertTask> tasks;
    for (uint32_t e = 0; e < X; ++e) if (count[e] > 0) tasks.push_back({e, count[e]});
    std::vector<Placement> p;
    a.offload->scheduler->place(a.layer, tasks, p);
    for (int side = 0; side < 2; ++side) {
      for (const Placement& q : p) {
        if (q.on_device != (side == 0)) continue;
        active.push_back(q.expert);
        placed.push_back(q);
      }
      if (side == 0) n_device = active.size();
    }
  } else {
    for (uint32_t e = 0; e < X; ++e) if (count[e] > 0) active.push_back(e);
  }
  std::vector<uint32_t> first(X, 0), sorted(T * K), row_of(T * K);
  std::vector<ExpertRun> runs(active.size());
  {
    uint32_t row = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      first[active[i]] = row;
      runs[i] = {&w.gate_exps, &w.up_exps, &w.down_exps, active[i], row, count[active[i]], active[i]};
      row += count[active[i]];
    }
    std::vector<uint32_t> fill(first);
    for (uint32_t s = 0; s < T * K; ++s) {
      const uint32_t r = fill[static_cast<uint32_t>(selected[s])]++;
      sorted[r] = s;
      row_of[s] = r;
    }
  }
  const size_t S = static_cast<size_t>(T) * K;
  float* in = scratch(in_buf, S * E);               // (T*K, n_embd) gathered, in row order
  maybe_parallel_for(a.pool, static_cast<int64_t>(S), kMinParallelRows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(&h[sorted[r] / K * E], E, &in[r * E]);
  });

  const bool shared = w.shexp_up.present();
  const size_t n_ff_sh = shared ? w.shexp_up.ne[1] : 0;
  float* g = scratch(g_buf, S * n_ff + T * n_ff_sh);  // gate outputs: routed rows, then shared
  float* u = scratch(u_buf, S * n_ff + T * n_ff_sh);  // up outputs (then the SwiGLU), same rows
  float* d = scratch(d_buf, S * E + T * E);           // down outputs: routed rows, then shared
  float* d_sh = d + S * E;
  const ExpertRows rows{in, g, u, d, h, g + S * n_ff, u + S * n_ff, d_sh, E, n_ff, n_ff_sh, T};
  if (a.offload == nullptr) {
    expert_rows(w, runs, 0, S, shared, rows, a.pool);
  } else {
    // The device copies its step's experts in, then computes them and the shared expert
    // while this thread computes the CPU's experts on the pool.
    SimulatedDevice& dev = *a.offload->device;
    const size_t S_dev = n_device == 0 ? 0 : runs[n_device - 1].row0 + runs[n_device - 1].n;
    std::vector<SimulatedDevice::ExpertViews> staged;
    staged.reserve(n_device);
    dev.run([&] {
      const auto t_copy = std::chrono::steady_clock::now();
      for (size_t i = 0; i < placed.size(); ++i) {
        const Placement& q = placed[i];
        if (q.copy && q.slot >= 0) dev.copy_to_slot(a.layer, q.expert, q.slot);
        if (i >= n_device) continue;
        const SimulatedDevice::ExpertViews* v = nullptr;
        if (q.slot >= 0) {
          v = &dev.slot_views(a.layer, q.slot);
        } else {
          staged.push_back(dev.stage(a.layer, q.expert, staged.size()));
          v = &staged.back();
        }
        runs[i].gate = &v->gate;
        runs[i].up = &v->up;
        runs[i].down = &v->down;
        runs[i].matrix = 0;
      }
      const auto t_compute = std::chrono::steady_clock::now();
      expert_rows(w, {runs.data(), n_device}, 0, S_dev, shared, rows, dev.pool());
      LayerTiming& tm = dev.timing(a.layer);
      tm.copy_s += std::chrono::duration<double>(t_compute - t_copy).count();
      tm.device_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_compute).count();
    });
    const auto t_cpu = std::chrono::steady_clock::now();
    expert_rows(w, {runs.data() + n_device, runs.size() - n_device}, S_dev, S, false, rows, a.pool);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_cpu).count();
    dev.wait();
    dev.timing(a.layer).cpu_s += cpu_s;  // after wait(): the device thread is done with the entry
  }

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
      if (shared && a.v.shexp_gate_inp.empty()) {
        for (size_t j = 0; j < E; ++j) o[j] += d_sh[t * E + j];
      } else if (shared) {
        double z = 0.0;
        for (size_t j = 0; j < E; ++j) z += static_cast<double>(a.v.shexp_gate_inp[j]) * h[t * E + j];
        const float gate = sigmoid(static_cast<float>(z));
        for (size_t j = 0; j < E; ++j) o[j] += d_sh[t * E + j] * gate;
      }
    }
  });
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos(t), {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
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
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos(t), {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
