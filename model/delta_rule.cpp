#include "model/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.h"
#include "quant/types.h"

namespace mt {
namespace {

// Dots of f32 rows through the CPU's run-time dispatched f32 kernels (cpu/kernels.h).
float dot(const float* a, const float* b, uint32_t n) {
  return cpu::kernels().vec_dot[static_cast<uint32_t>(QuantType::F32)](n, a, b);
}

// y[t * y_stride + r] = dot(w row r, act row t) for r < rows, t < n_tok; rows n floats,
// w_stride / act_stride floats apart (a tile kernel reads each w row once for the tile).
void dots(uint32_t n, const float* w, size_t w_stride, uint32_t rows, const float* act, size_t act_stride, uint32_t n_tok,
          float* y, size_t y_stride) {
  const cpu::KernelTable& k = cpu::kernels();
  const auto f32 = static_cast<uint32_t>(QuantType::F32);
  if (k.gemm[f32] != nullptr) {
    k.gemm[f32](n, w, w_stride * sizeof(float), rows, act, act_stride * sizeof(float), n_tok, y, static_cast<int64_t>(y_stride));
  } else {
    cpu::gemm_by_vec_dot(k.vec_dot[f32], n, w, w_stride * sizeof(float), rows, act, act_stride * sizeof(float), n_tok, y,
                         static_cast<int64_t>(y_stride));
  }
}

void axpy(float* y, float a, const float* x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One chunk of n <= kDeltaChunk tokens starting at token t0 of the run.
void delta_chunk(const DeltaRun& r, uint32_t t0, uint32_t n, float* m) {
  const uint32_t dk = r.dk, dv = r.dv;
  thread_local std::vector<float> G, sk, sq, d, kk, qk, decay;
  G.resize(n);
  decay.resize(static_cast<size_t>(n) * n);  // e^{G_t - G_s} (s <= t)
  sk.resize(static_cast<size_t>(n) * dv);  // S0^T k_t
  sq.resize(static_cast<size_t>(n) * dv);  // S0^T q_t
  d.resize(static_cast<size_t>(n) * dv);   // the deltas
  kk.resize(static_cast<size_t>(n) * n);   // k_t . k_s (s < t)
  qk.resize(static_cast<size_t>(n) * n);   // q_t . k_s (s <= t)
  auto q = [&](uint32_t t) { return r.q + (t0 + t) * r.qk_stride; };
  auto k = [&](uint32_t t) { return r.k + (t0 + t) * r.qk_stride; };
  auto v = [&](uint32_t t) { return r.v + (t0 + t) * r.v_stride; };
  auto g = [&](uint32_t t) { return r.g[(t0 + t) * r.gb_stride]; };
  auto beta = [&](uint32_t t) { return r.beta[(t0 + t) * r.gb_stride]; };

  float run = 0.0f;
  for (uint32_t t = 0; t < n; ++t) G[t] = run += g(t);
  for (uint32_t t = 0; t < n; ++t) {
    for (uint32_t s = 0; s <= t; ++s) decay[t * n + s] = std::exp(G[t] - G[s]);
  }
  // S0^T k_t and S0^T q_t: the state's dv rows against the chunk's tokens; k_t . k_s and
  // q_t . k_s for every pair (the upper triangles are not used).
  dots(dk, m, dk, dv, k(0), r.qk_stride, n, sk.data(), dv);
  dots(dk, m, dk, dv, q(0), r.qk_stride, n, sq.data(), dv);
  dots(dk, k(0), r.qk_stride, n, k(0), r.qk_stride, n, kk.data(), n);
  dots(dk, k(0), r.qk_stride, n, q(0), r.qk_stride, n, qk.data(), n);
  // Forward substitution: row t needs the finished rows before it.
  for (uint32_t t = 0; t < n; ++t) {
    float* dt = &d[t * dv];
    const float eg = std::exp(G[t]), b = beta(t);
    const float* vt = v(t);
    for (uint32_t j = 0; j < dv; ++j) dt[j] = b * (vt[j] - eg * sk[t * dv + j]);
    for (uint32_t s = 0; s < t; ++s) axpy(dt, -b * kk[t * n + s] * decay[t * n + s], &d[s * dv], dv);
  }
  for (uint32_t t = 0; t < n; ++t) {
    float* o = r.out + (t0 + t) * r.out_stride;
    const float eg = std::exp(G[t]);
    for (uint32_t j = 0; j < dv; ++j) o[j] = eg * sq[t * dv + j];
    for (uint32_t s = 0; s <= t; ++s) axpy(o, qk[t * n + s] * decay[t * n + s], &d[s * dv], dv);
    for (uint32_t j = 0; j < dv; ++j) o[j] *= r.scale;
  }
  const float glast = G[n - 1], elast = std::exp(glast);
  for (uint32_t j = 0; j < dv; ++j) {
    float* mj = m + static_cast<size_t>(j) * dk;
    for (uint32_t i = 0; i < dk; ++i) mj[i] *= elast;
    for (uint32_t s = 0; s < n; ++s) axpy(mj, decay[(n - 1) * n + s] * d[s * dv + j], k(s), dk);
  }
}

}  // namespace

void delta_rule_recurrent(const DeltaRun& r, float* m) {
  const uint32_t dk = r.dk, dv = r.dv;
  thread_local std::vector<float> delta;
  delta.resize(dv);
  for (uint32_t t = 0; t < r.n; ++t) {
    const float* q = r.q + t * r.qk_stride;
    const float* k = r.k + t * r.qk_stride;
    const float* v = r.v + t * r.v_stride;
    const float decay = std::exp(r.g[t * r.gb_stride]), b = r.beta[t * r.gb_stride];
    for (size_t i = 0; i < static_cast<size_t>(dk) * dv; ++i) m[i] *= decay;
    for (uint32_t j = 0; j < dv; ++j) delta[j] = (v[j] - dot(m + static_cast<size_t>(j) * dk, k, dk)) * b;
    for (uint32_t j = 0; j < dv; ++j) axpy(m + static_cast<size_t>(j) * dk, delta[j], k, dk);
    float* o = r.out + t * r.out_stride;
    for (uint32_t j = 0; j < dv; ++j) o[j] = dot(m + static_cast<size_t>(j) * dk, q, dk) * r.scale;
  }
}

void delta_rule_chunked(const DeltaRun& r, float* m) {
  for (uint32_t t0 = 0; t0 < r.n; t0 += kDeltaChunk) delta_chunk(r, t0, std::min(kDeltaChunk, r.n - t0), m);
}

}  // namespace mt
