// The delta rule's chunked form on the device (cuda/kernels/ops_gdn_chunk.cu) against the CPU's
// (model/delta_rule.h) on random inputs, dk 64 and 128, tiled and grouped key heads: the
// outputs and the final state of one call; a chunked prefill then recurrent decode tokens
// (the state must mean the same to the recurrent kernel); a prefill cut into two calls.
//
// Bound: |got - want| <= 1e-5 max |want|, per tensor. Everything is f32 with sums of at most
// dk products per dot and a 64-token chunk's terms per delta, on unit-norm q and k; the
// forms differ only in rounding (a few ulp of expf / sqrtf on the device, the order of the
// dots). A host mirror of the kernel's algebra stayed within 1e-6 of max |want| against the
// CPU's chunked and recurrent forms up to 700 tokens, so 1e-5 leaves a factor of ten.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_gdn_chunk.h"
#include "cuda_test_util.h"
#include "model/delta_rule.h"

namespace mt::cuda {
namespace {

using test::randn;
using test::to_device;
using test::to_host;

constexpr float kRel = 1e-5f;

struct Shape {
  int dk = 0, nk = 2, nv = 4;
  bool tiled = true;
  int key_dim() const { return nk * dk; }
  int conv_dim() const { return 2 * key_dim() + nv * dk; }
  int value_dim() const { return nv * dk; }
  size_t state_floats() const { return static_cast<size_t>(nv) * dk * dk; }
  int key_head(int h) const { return tiled ? h % nk : h / (nv / nk); }
};

// T tokens: u (T, conv_dim) normal, g (T, nv) in [-0.3, 0] (decays e^g in [0.74, 1]: long
// memories, the hard case), beta (T, nv) in [0, 1].
struct Inputs {
  int T = 0;
  std::vector<float> u, g, beta;
};

Inputs random_inputs(const Shape& s, int T, std::mt19937& rng) {
  Inputs in;
  in.T = T;
  in.u = randn(static_cast<size_t>(T) * s.conv_dim(), rng);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  in.g.resize(static_cast<size_t>(T) * s.nv);
  in.beta.resize(in.g.size());
  for (float& x : in.g) x = -0.3f * unit(rng);
  for (float& x : in.beta) x = unit(rng);
  return in;
}

// The CPU model's path on rows [t0, t0 + n): q and k L2-normalised as
// model/gated_delta_net.cpp does (sum of squares in double), then per value head the chunked
// or the recurrent form of model/delta_rule.h on its state. out (n, value_dim).
std::vector<float> cpu_delta_rule(const Shape& s, const Inputs& in, int t0, int n, bool chunked, float eps,
                                  std::vector<float>& state) {
  const int C = s.conv_dim(), dk = s.dk;
  const auto row = [&](int t) { return in.u.begin() + static_cast<ptrdiff_t>(t) * C; };
  std::vector<float> u(row(t0), row(t0 + n));
  for (int t = 0; t < n; ++t) {
    for (int hh = 0; hh < 2 * s.nk; ++hh) {  // the q heads, then the k heads
      float* x = &u[static_cast<size_t>(t) * C + hh * dk];
      double sum = 0.0;
      for (int i = 0; i < dk; ++i) sum += static_cast<double>(x[i]) * x[i];
      const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
      for (int i = 0; i < dk; ++i) x[i] *= scale;
    }
  }
  std::vector<float> out(static_cast<size_t>(n) * s.value_dim());
  for (int h = 0; h < s.nv; ++h) {
    const int kh = s.key_head(h);
    DeltaRun run;
    run.n = static_cast<uint32_t>(n);
    run.dk = run.dv = static_cast<uint32_t>(dk);
    run.q = &u[kh * dk];
    run.k = &u[s.key_dim() + kh * dk];
    run.qk_stride = run.v_stride = C;
    run.v = &u[2 * s.key_dim() + h * dk];
    run.g = &in.g[static_cast<size_t>(t0) * s.nv + h];
    run.beta = &in.beta[static_cast<size_t>(t0) * s.nv + h];
    run.gb_stride = s.nv;
    run.scale = 1.0f / std::sqrt(static_cast<float>(dk));
    run.out = &out[h * dk];
    run.out_stride = s.value_dim();
    float* st = &state[static_cast<size_t>(h) * dk * dk];
    if (chunked) mt::delta_rule_chunked(run, st);
    else mt::delta_rule_recurrent(run, st);
  }
  return out;
}

// The inputs on the device and the calls on rows [t0, t0 + n): `direct` calls the chunked
// form whatever n; otherwise delta_rule (cuda/kernels/ops.h) picks the form.
struct Device {
  Shape s;
  DeviceBuffer u, g, beta, state;
  float eps = 1e-6f;

  Device(const Shape& shape, const Inputs& in, const std::vector<float>& state0)
      : s(shape), u(to_device(in.u)), g(to_device(in.g)), beta(to_device(in.beta)), state(to_device(state0)) {}

  std::vector<float> run(int t0, int n, bool direct) {
    DeviceBuffer out(static_cast<size_t>(n) * s.value_dim() * sizeof(float));
    DeltaRuleArgs a;
    a.u = u.as<float>() + static_cast<size_t>(t0) * s.conv_dim();
    a.conv_dim = s.conv_dim(), a.key_dim = s.key_dim();
    a.nk = s.nk, a.nv = s.nv, a.dk = s.dk, a.tiled = s.tiled;
    a.g = g.as<float>() + static_cast<size_t>(t0) * s.nv;
    a.beta = beta.as<float>() + static_cast<size_t>(t0) * s.nv;
    a.state = state.as<float>(), a.out = out.as<float>(), a.T = n, a.eps = eps;
    if (direct) delta_rule_chunked(a, nullptr);
    else delta_rule(a, nullptr);
    return to_host<float>(out, static_cast<size_t>(n) * s.value_dim());
  }
  std::vector<float> state_host() const { return to_host<float>(state, s.state_floats()); }
};

// max |got - want| <= kRel max |want| over the tensor.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float peak = 0.0f, worst = 0.0f;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    peak = std::max(peak, std::fabs(want[i]));
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= worst)) worst = d, at = i;  // NaN lands here too
  }
  EXPECT_LE(worst, kRel * peak) << what << ": worst at [" << at << "] got " << got[at] << " want " << want[at]
                                << " (max |want| " << peak << ")";
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  for (int dk : {64, 128}) {
    for (bool tiled : {true, false}) {
      Shape s;
      s.dk = dk, s.tiled = tiled;
      v.push_back(s);
    }
  }
  return v;
}

const int kLengths[] = {1, 3, 63, 64, 65, 200, 700};

TEST(CudaGdnChunk, MatchesCpuChunked) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(11);
  for (const Shape& s : shapes()) {
    for (int T : kLengths) {
      SCOPED_TRACE(testing::Message() << "dk " << s.dk << (s.tiled ? " tiled" : " grouped") << " T " << T);
      const Inputs in = random_inputs(s, T, rng);
      const std::vector<float> state0 = randn(s.state_floats(), rng, 0.1f);
      Device dev(s, in, state0);
      const std::vector<float> got = dev.run(0, T, /*direct=*/true);
      std::vector<float> state = state0;
      const std::vector<float> want = cpu_delta_rule(s, in, 0, T, /*chunked=*/true, dev.eps, state);
      expect_close(got, want, "out");
      expect_close(dev.state_host(), state, "state");
    }
  }
}

// delta_rule's pick for the prefill (chunked from kChunkedMinTokens on), then 5 tokens one
// by one through the recurrent kernel; the CPU: chunked, then recurrent one token a call.
TEST(CudaGdnChunk, DecodeContinuesAfterChunkedPrefill) {
  MT_SKIP_WITHOUT_DEVICE();
  constexpr int kDecode = 5;
  std::mt19937 rng(12);
  for (const Shape& s : shapes()) {
    for (int T : kLengths) {
      SCOPED_TRACE(testing::Message() << "dk " << s.dk << (s.tiled ? " tiled" : " grouped") << " T " << T);
      const Inputs in = random_inputs(s, T + kDecode, rng);
      const std::vector<float> state0 = randn(s.state_floats(), rng, 0.1f);
      Device dev(s, in, state0);
      std::vector<float> state = state0;
      expect_close(dev.run(0, T, /*direct=*/false), cpu_delta_rule(s, in, 0, T, true, dev.eps, state), "prefill out");
      for (int t = T; t < T + kDecode; ++t) {
        expect_close(dev.run(t, 1, /*direct=*/false), cpu_delta_rule(s, in, t, 1, false, dev.eps, state), "decode out");
      }
      expect_close(dev.state_host(), state, "state after decode");
    }
  }
}

// 200 tokens in one call, or in two (100 + 100: whole chunks and a part; 130 + 70: a part
// chunk at the cut), through the chunked form: the same outputs and state.
TEST(CudaGdnChunk, SplitPrefillEqualsOneCall) {
  MT_SKIP_WITHOUT_DEVICE();
  constexpr int T = 200;
  std::mt19937 rng(13);
  for (const Shape& s : shapes()) {
    for (int cut : {100, 130}) {
      SCOPED_TRACE(testing::Message() << "dk " << s.dk << (s.tiled ? " tiled" : " grouped") << " cut " << cut);
      const Inputs in = random_inputs(s, T, rng);
      const std::vector<float> state0 = randn(s.state_floats(), rng, 0.1f);
      Device one(s, in, state0), two(s, in, state0);
      const std::vector<float> want = one.run(0, T, /*direct=*/true);
      std::vector<float> got = two.run(0, cut, /*direct=*/true);
      const std::vector<float> rest = two.run(cut, T - cut, /*direct=*/true);
      got.insert(got.end(), rest.begin(), rest.end());
      expect_close(got, want, "out");
      expect_close(two.state_host(), one.state_host(), "state");
    }
  }
}

}  // namespace
}  // namespace mt::cuda
