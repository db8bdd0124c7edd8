// The FFN sub-blocks: routed experts (with the shared expert) and the dense SwiGLU.
//
// Routed experts, for a batch of T tokens with top-k K: the T*K (token, rank) slots are
// counting-sorted by expert, so each active expert's tokens are one contiguous run of
// the gathered input. Then three pool hand-offs for the whole layer: gate and up of every
// active expert (and of the shared expert) as one matmul_jobs call, SwiGLU, all the down
// matrices as a second call (expert_rows.h); the weighted sum in rank order follows.
// Tiered (a MoeOffload in BlockArgs), the layer-step goes through the tiered-expert
// executor (experts/executor.h) over the simulated device (offload.h): the device's
// experts and the CPU's run at the same time, every expert's rows bit-identical to the
// plain path's.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "core/check.h"
#include "experts/routing_replay.h"
#include "model/activations.h"
#include "model/expert_rows.h"
#include "model/layers.h"
#include "model/linear.h"
#include "model/offload.h"

namespace mt {
namespace {

// A per-thread buffer of at least n floats, reused across calls (no zeroing).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// The untiered routed experts: the T*K slots (token * K + rank) counting-sorted by
// expert, so each active expert's slots (ascending id) are one contiguous run of the
// gathered input; gate and up of every run (and of the shared expert) as one pool
// hand-off, the SwiGLU, all the downs as a second (expert_rows). row_of[slot] is the
// slot's row of rows.d.
void local_experts(const LayerWeights& w, std::span<const int32_t> selected, uint32_t X, uint32_t K, bool shared,
                   const ExpertRows& rows, std::vector<uint32_t>& row_of, ThreadPool& pool) {
  const size_t S = selected.size(), E = rows.E;
  std::vector<uint32_t> count(X, 0);
  for (size_t s = 0; s < S; ++s) ++count[static_cast<uint32_t>(selected[s])];
  std::vector<uint32_t> first(X, 0), sorted(S);
  std::vector<ExpertRun> runs;
  uint32_t row = 0;
  for (uint32_t e = 0; e < X; ++e) {
    if (count[e] == 0) continue;
    first[e] = row;
    runs.push_back({&w.gate_exps, &w.up_exps, &w.down_exps, e, row, count[e], e});
    row += count[e];
  }
  for (size_t s = 0; s < S; ++s) {
    const uint32_t r = first[static_cast<uint32_t>(selected[s])]++;
    sorted[r] = static_cast<uint32_t>(s);
    row_of[s] = r;
  }
  float* in = const_cast<float*>(rows.in);  // (T*K, n_embd) gathered, in row order
  maybe_parallel_for(pool, static_cast<int64_t>(S), kMinParallelRows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(&rows.h[sorted[r] / K * E], E, &in[r * E]);
  });
  expert_rows(w, runs, 0, S, shared, rows, pool);
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
  }
  // Routing replay (experts/routing_replay.h): the stream's experts in place of the top-k.
  if (RoutingReplay* replay = a.trace ? a.trace->routing_override() : nullptr) {
    MT_CHECK(replay->top_k() == K);
    replay->replace(a.layer, T, selected.data(), weights.data());
  }
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->routing(a.layer, a.pos(t), {&selected[t * K], K}, {&weights[t * K], K});

  const size_t S = static_cast<size_t>(T) * K;
  const bool shared = w.shexp_up.present();
  const size_t n_ff_sh = shared ? w.shexp_up.ne[1] : 0;
  float* g = scratch(g_buf, S * n_ff + T * n_ff_sh);  // gate outputs: routed rows, then shared
  float* u = scratch(u_buf, S * n_ff + T * n_ff_sh);  // up outputs (then the SwiGLU), same rows
  float* d = scratch(d_buf, S * E + T * E);           // down outputs: routed rows, then shared
  float* d_sh = d + S * E;
  // row_of[slot] (slot = token * K + rank): the slot's row of d.
  std::vector<uint32_t> row_of(S);
  if (a.offload == nullptr) {
    const ExpertRows rows{scratch(in_buf, S * E), g, u, d, h, g + S * n_ff, u + S * n_ff, d_sh, E, n_ff, n_ff_sh, T};
    local_experts(w, selected, X, K, shared, rows, row_of, a.pool);
  } else {
    // Tiered (experts/executor.h): the device computes its experts (and the shared
    // expert) while this thread computes the CPU's; every slot's row lands at d[slot].
    for (size_t s = 0; s < S; ++s) row_of[s] = static_cast<uint32_t>(s);
    SimulatedDevice::Layer target{&w, h, T, d, shared, g + S * n_ff, u + S * n_ff, d_sh, n_ff_sh};
    a.offload->device->begin_layer(target);
    a.offload->executor->run({a.layer, T, K, selected.data(), h});
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
