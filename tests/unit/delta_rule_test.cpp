// The gated delta rule (model/delta_rule.h): the recurrent and the chunked forms against a
// scalar reference that keeps S untransposed in double precision, over runs that end
// before, at and after chunk boundaries, from a non-zero state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/delta_rule.h"

namespace mt {
namespace {

struct Inputs {
  uint32_t n, dk, dv;
  std::vector<float> q, k, v, g, beta, state;  // state transposed: m[j * dk + i] = S[i][j]
};

Inputs make_inputs(uint32_t n, uint32_t dk, uint32_t dv, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in{n, dk, dv, {}, {}, {}, {}, {}, {}};
  auto unit_rows = [&](std::vector<float>& x) {  // L2-normalised rows, as the block feeds them
    x.resize(static_cast<size_t>(n) * dk);
    for (uint32_t t = 0; t < n; ++t) {
      double s = 0;
      for (uint32_t i = 0; i < dk; ++i) s += std::pow(x[t * dk + i] = normal(rng), 2);
      for (uint32_t i = 0; i < dk; ++i) x[t * dk + i] /= static_cast<float>(std::sqrt(s));
    }
  };
  unit_rows(in.q);
  unit_rows(in.k);
  for (uint32_t i = 0; i < n * dv; ++i) in.v.push_back(normal(rng));
  for (uint32_t t = 0; t < n; ++t) {
    in.g.push_back(-0.5f * unit(rng));
    in.beta.push_back(unit(rng));
  }
  for (uint32_t i = 0; i < dk * dv; ++i) in.state.push_back(0.3f * normal(rng));
  return in;
}

// S (dk x dv, row-major by key index) in double, the recurrence exactly as written.
void reference(const Inputs& in, float scale, std::vector<double>& out, std::vector<double>& S) {
  const uint32_t dk = in.dk, dv = in.dv;
  S.assign(static_cast<size_t>(dk) * dv, 0.0);
  for (uint32_t i = 0; i < dk; ++i) {
    for (uint32_t j = 0; j < dv; ++j) S[i * dv + j] = in.state[j * dk + i];
  }
  out.assign(static_cast<size_t>(in.n) * dv, 0.0);
  for (uint32_t t = 0; t < in.n; ++t) {
    const double decay = std::exp(static_cast<double>(in.g[t]));
    for (double& s : S) s *= decay;
    for (uint32_t j = 0; j < dv; ++j) {
      double m = 0;
      for (uint32_t i = 0; i < dk; ++i) m += S[i * dv + j] * in.k[t * dk + i];
      const double delta = in.beta[t] * (in.v[t * dv + j] - m);
      for (uint32_t i = 0; i < dk; ++i) S[i * dv + j] += in.k[t * dk + i] * delta;
    }
    for (uint32_t j = 0; j < dv; ++j) {
      double o = 0;
      for (uint32_t i = 0; i < dk; ++i) o += S[i * dv + j] * in.q[t * dk + i];
      out[t * dv + j] = o * scale;
    }
  }
}

TEST(DeltaRule, RecurrentAndChunkedMatchTheScalarReference) {
  for (uint32_t n : {1u, 3u, 63u, 64u, 65u, 150u}) {
    for (auto [dk, dv] : {std::pair{16u, 16u}, std::pair{32u, 32u}}) {
      Inputs in = make_inputs(n, dk, dv, n * 7 + dk);
      const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
      std::vector<double> ref, ref_state;
      reference(in, scale, ref, ref_state);
      for (bool chunked : {false, true}) {
        std::vector<float> out(static_cast<size_t>(n) * dv, 0.0f), state = in.state;
        DeltaRun run;
        run.n = n;
        run.dk = dk;
        run.dv = dv;
        run.q = in.q.data();
        run.k = in.k.data();
        run.qk_stride = dk;
        run.v = in.v.data();
        run.v_stride = dv;
        run.g = in.g.data();
        run.beta = in.beta.data();
        run.gb_stride = 1;
        run.scale = scale;
        run.out = out.data();
        run.out_stride = dv;
        if (chunked) delta_rule_chunked(run, state.data());
        else delta_rule_recurrent(run, state.data());
        double worst_out = 0, worst_state = 0;
        for (size_t i = 0; i < out.size(); ++i) worst_out = std::max(worst_out, std::fabs(out[i] - ref[i]));
        for (uint32_t i = 0; i < dk; ++i) {
          for (uint32_t j = 0; j < dv; ++j) {
            worst_state = std::max(worst_state, std::fabs(state[j * dk + i] - ref_state[i * dv + j]));
          }
        }
        EXPECT_LE(worst_out, 2e-5) << "n " << n << " dk " << dk << (chunked ? " chunked" : " recurrent");
        EXPECT_LE(worst_state, 2e-5) << "n " << n << " dk " << dk << (chunked ? " chunked" : " recurrent");
      }
    }
  }
}

// A run in two calls (the state carried between them) equals one call.
TEST(DeltaRule, ChunkedRunsCompose) {
  const uint32_t n = 100, d = 16;
  Inputs in = make_inputs(n, d, d, 5);
  auto run_of = [&](uint32_t t0, uint32_t len, float* out) {
    DeltaRun r;
    r.n = len;
    r.dk = r.dv = d;
    r.q = &in.q[t0 * d];
    r.k = &in.k[t0 * d];
    r.qk_stride = d;
    r.v = &in.v[t0 * d];
    r.v_stride = d;
    r.g = &in.g[t0];
    r.beta = &in.beta[t0];
    r.gb_stride = 1;
    r.scale = 0.25f;
    r.out = out + t0 * d;
    r.out_stride = d;
    return r;
  };
  std::vector<float> whole(n * d), split(n * d), s1 = in.state, s2 = in.state;
  delta_rule_chunked(run_of(0, n, whole.data()), s1.data());
  delta_rule_chunked(run_of(0, 41, split.data()), s2.data());
  delta_rule_chunked(run_of(41, n - 41, split.data()), s2.data());
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], split[i], 1e-5f) << i;
  for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s1[i], s2[i], 1e-5f) << i;
}

}  // namespace
}  // namespace mt
