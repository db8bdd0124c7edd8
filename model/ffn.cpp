// The FFN sub-blocks: routed experts (with the shared expert) and the dense SwiGLU.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "model/layers.h"
#include "model/linear.h"

namespace mt {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// softmax in place (max-subtracted, sum accumulated in double).
void softmax(float* x, size_t n) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

// out (rows, n_out) = SwiGLU FFN of h (rows, n_in): down(silu(gate h) * up h), using
// matrix `m` of the given tensors. gate may be absent (ungated experts: silu(up h)).
void swiglu_ffn(const Tensor& gate, const Tensor& up, const Tensor& down, uint64_t m, const float* h, uint32_t rows,
                float* out, ThreadPool& pool) {
  const size_t n_ff = up.ne[1];
  std::vector<float> g(rows * n_ff), u(rows * n_ff);
  matmul(up, m, h, rows, u.data(), pool);
  if (gate.present()) {
    matmul(gate, m, h, rows, g.data(), pool);
    for (size_t i = 0; i < u.size(); ++i) u[i] = silu(g[i]) * u[i];
  } else {
    for (float& x : u) x = silu(x);
  }
  matmul(down, m, u.data(), rows, out, pool);
}

}  // namespace

void moe_block(const BlockArgs& a, const MoeMath& math) {
  const HParams& hp = a.hp;
  const size_t E = hp.n_embd;
  const uint32_t T = a.n_tokens, K = hp.n_expert_used, X = hp.n_expert;
  std::vector<float> h(T * E), probs(T * X), out(T * E, 0.0f);
  for (uint32_t t = 0; t < T; ++t) rms_norm(a.x + t * E, a.v.ffn_norm, hp.rms_eps, E, &h[t * E]);
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_norm", a.layer, a.pos0 + t, {&h[t * E], E});

  // Router: softmax over all experts, top-k by probability, weights from the same probs.
  matmul(a.w.router, 0, h.data(), T, probs.data(), a.pool);
  std::vector<int32_t> selected(T * K);
  std::vector<float> weights(T * K);
  for (uint32_t t = 0; t < T; ++t) {
    float* p = &probs[t * X];
    softmax(p, X);
    if (a.trace) a.trace->tensor("ffn_moe_probs", a.layer, a.pos0 + t, {p, X});
    std::vector<int32_t> order(X);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return p[i] > p[j]; });
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

  // Each selected expert runs once over all the tokens that chose it.
  std::vector<float> expert_out(static_cast<size_t>(T) * K * E);  // (token, rank, n_embd)
  for (uint32_t e = 0; e < X; ++e) {
    std::vector<uint32_t> slots;  // token * K + rank
    for (uint32_t s = 0; s < T * K; ++s) {
      if (selected[s] == static_cast<int32_t>(e)) slots.push_back(s);
    }
    if (slots.empty()) continue;
    const uint32_t n = static_cast<uint32_t>(slots.size());
    std::vector<float> in(n * E), res(n * E);
    for (uint32_t i = 0; i < n; ++i) std::copy_n(&h[slots[i] / K * E], E, &in[i * E]);
    swiglu_ffn(a.w.gate_exps, a.w.up_exps, a.w.down_exps, e, in.data(), n, res.data(), a.pool);
    for (uint32_t i = 0; i < n; ++i) std::copy_n(&res[i * E], E, &expert_out[slots[i] * E]);
  }
  // Weighted sum in rank order.
  for (uint32_t t = 0; t < T; ++t) {
    float* o = &out[t * E];
    for (uint32_t i = 0; i < K; ++i) {
      const float w = weights[t * K + i];
      const float* d = &expert_out[(t * K + i) * E];
      for (size_t j = 0; j < E; ++j) o[j] += d[j] * w;
    }
  }

  if (a.w.shexp_up.present()) {
    std::vector<float> shared(T * E);
    swiglu_ffn(a.w.shexp_gate, a.w.shexp_up, a.w.shexp_down, 0, h.data(), T, shared.data(), a.pool);
    for (uint32_t t = 0; t < T; ++t) {
      double z = 0.0;
      for (size_t j = 0; j < E; ++j) z += static_cast<double>(a.v.shexp_gate_inp[j]) * h[t * E + j];
      const float gate = 1.0f / (1.0f + std::exp(-static_cast<float>(z)));
      for (size_t j = 0; j < E; ++j) out[t * E + j] += shared[t * E + j] * gate;
    }
  }
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos0 + t, {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

void dense_ffn_block(const BlockArgs& a) {
  const HParams& hp = a.hp;
  const size_t E = hp.n_embd;
  const uint32_t T = a.n_tokens;
  std::vector<float> h(T * E), out(T * E);
  for (uint32_t t = 0; t < T; ++t) rms_norm(a.x + t * E, a.v.ffn_norm, hp.rms_eps, E, &h[t * E]);
  swiglu_ffn(a.w.ffn_gate, a.w.ffn_up, a.w.ffn_down, 0, h.data(), T, out.data(), a.pool);
  if (a.trace) for (uint32_t t = 0; t < T; ++t) a.trace->tensor("ffn_out", a.layer, a.pos0 + t, {&out[t * E], E});
  for (size_t i = 0; i < T * E; ++i) a.x[i] += out[i];
}

}  // namespace mt
