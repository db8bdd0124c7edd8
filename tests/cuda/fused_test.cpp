// The decode step's fused launches (cuda/kernels/ops_fused.cu) against the unfused ops they
// replace, byte for byte: add_rms_norm = add + rms_norm; swiglu_pairs = swiglu on split
// rows; add_rms_norm_quant = add_rms_norm + quantize_act; swiglu_pairs_quant =
// swiglu_pairs + quantize_act; moe_combine_add_rms_norm = moe_combine + add_rms_norm(_quant).
// The row kernels' wide CTAs (a decode step's <= 8 rows) write the bytes of their 256-thread
// CTAs. And the model: decode
// through the replayed CUDA graph equals plain launches over 300 tokens (crossing a graph
// span), for two architectures. The Gated DeltaNet decode launch (delta_rule_gated) equals
// gdn_gates + delta_rule + gated_rms_norm within the reordering of one double sum. The
// attention's fused launches: attention_fused_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_model.h"
#include "cuda/kernels/mmvq.h"
#include "cuda/kernels/ops.h"
#include "cuda_test_util.h"
#include "tiny_model.h"
#include "model/model.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::randn;
using test::to_host;

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CudaFused, GatedDeltaRuleEqualsGatesRuleAndNorm) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  for (int dk : {64, 128}) {
    for (bool grouped : {false, true}) {
      for (int T : {1, 3, 7}) {
        SCOPED_TRACE("dk " + std::to_string(dk) + (grouped ? " grouped" : " split") + " T " + std::to_string(T));
        const int nk = 2, nv = 4, key_dim = nk * dk, conv_dim = 2 * key_dim + nv * dk, V = nv * dk;
        const std::vector<float> u = randn(static_cast<size_t>(T) * conv_dim, rng);
        const std::vector<float> ba = randn(static_cast<size_t>(T) * 2 * nv, rng);  // b then a per row (or grouped)
        const std::vector<float> z = randn(static_cast<size_t>(T) * V, rng);
        const std::vector<float> w = randn(dk, rng), ssm_a = randn(nv, rng, 0.5f), dt = randn(nv, rng, 0.5f);
        const std::vector<float> state = randn(static_cast<size_t>(nv) * dk * dk, rng, 0.1f);
        DeviceBuffer du = to_device(u), dba = to_device(ba), dz = to_device(z), dw = to_device(w);
        DeviceBuffer da = to_device(ssm_a), ddt = to_device(dt), s1 = to_device(state), s2 = to_device(state);
        DeviceBuffer beta(sizeof(float) * T * nv), g(sizeof(float) * T * nv), o1(sizeof(float) * T * V),
            o2(sizeof(float) * T * V);
        GdnGateArgs ga;
        ga.b = dba.as<float>(), ga.a = grouped ? nullptr : dba.as<float>() + nv, ga.stride = 2 * nv;
        ga.ssm_a = da.as<float>(), ga.dt_bias = ddt.as<float>(), ga.grouped = grouped;
        GdnNormArgs na;
        na.z = dz.as<float>(), na.z_stride = V, na.w = dw.as<float>(), na.eps = 1e-6f;
        DeltaRuleArgs a;
        a.u = du.as<float>(), a.conv_dim = conv_dim, a.key_dim = key_dim, a.nk = nk, a.nv = nv, a.dk = dk;
        a.g = g.as<float>(), a.beta = beta.as<float>(), a.T = T, a.eps = 1e-6f;
        a.state = s1.as<float>(), a.out = o1.as<float>();
        gdn_gates(ga, T, nv, nk, beta.as<float>(), g.as<float>(), nullptr);
        delta_rule(a, nullptr);
        gated_rms_norm(o1.as<float>(), na, T, nv, dk, nullptr);
        a.state = s2.as<float>(), a.out = o2.as<float>();
        ASSERT_TRUE(delta_rule_gated_fits(T));
        delta_rule_gated(a, ga, na, nullptr);
        // The states are the same bytes (the same gates, the same float updates); the normed
        // rows differ at most by the double sum's order, rounded to float.
        EXPECT_TRUE(same_bytes(to_host<float>(s1, state.size()), to_host<float>(s2, state.size()))) << "state";
        const std::vector<float> r1 = to_host<float>(o1, static_cast<size_t>(T) * V), r2 = to_host<float>(o2, r1.size());
        float worst = 0, scale = 0;
        for (size_t i = 0; i < r1.size(); ++i) {
          worst = std::max(worst, std::fabs(r1[i] - r2[i]));
          scale = std::max(scale, std::fabs(r1[i]));
        }
        EXPECT_LE(worst, 1e-6f * scale);
      }
    }
  }
}

TEST(CudaFused, AddRmsNormEqualsAddThenRmsNorm) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  for (int n : {64, 2048, 3000}) {
    const int rows = 5;
    const std::vector<float> x = randn(static_cast<size_t>(rows) * n, rng, 2.0f), y = randn(x.size(), rng);
    const std::vector<float> w = randn(n, rng);
    DeviceBuffer x1 = to_device(x), x2 = to_device(x), dy = to_device(y), dw = to_device(w);
    DeviceBuffer o1(x.size() * sizeof(float)), o2(x.size() * sizeof(float));
    add(x1.as<float>(), dy.as<float>(), static_cast<int64_t>(x.size()), nullptr);
    rms_norm({x1.as<float>(), n, dw.as<float>(), 1e-6f, rows, n, o1.as<float>(), n}, nullptr);
    add_rms_norm(x2.as<float>(), dy.as<float>(), dw.as<float>(), 1e-6f, rows, n, o2.as<float>(), nullptr);
    EXPECT_TRUE(same_bytes(to_host<float>(x1, x.size()), to_host<float>(x2, x.size()))) << "x, n " << n;
    EXPECT_TRUE(same_bytes(to_host<float>(o1, x.size()), to_host<float>(o2, x.size()))) << "out, n " << n;
    // y null: x unchanged, out = rms_norm(x).
    DeviceBuffer x3 = to_device(x), o3(x.size() * sizeof(float)), o4(x.size() * sizeof(float));
    rms_norm({x3.as<float>(), n, dw.as<float>(), 1e-6f, rows, n, o3.as<float>(), n}, nullptr);
    add_rms_norm(x3.as<float>(), nullptr, dw.as<float>(), 1e-6f, rows, n, o4.as<float>(), nullptr);
    EXPECT_TRUE(same_bytes(to_host<float>(x3, x.size()), x)) << "x kept, n " << n;
    EXPECT_TRUE(same_bytes(to_host<float>(o3, x.size()), to_host<float>(o4, x.size()))) << "norm only, n " << n;
  }
}

TEST(CudaFused, AddRmsNormQuantEqualsNormThenQuantize) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(4);
  for (ActQuant mode : {ActQuant::kQ8_K, ActQuant::kQ8_0}) {
    for (int n : {2048, 2880, 4096}) {
      if (!add_rms_norm_quant_supports(n, mode)) continue;
      SCOPED_TRACE(testing::Message() << "mode " << static_cast<int>(mode) << " n " << n);
      const int rows = 3;
      const std::vector<float> x = randn(static_cast<size_t>(rows) * n, rng, 2.0f), y = randn(x.size(), rng);
      const std::vector<float> w = randn(n, rng);
      DeviceBuffer x1 = to_device(x), x2 = to_device(x), dy = to_device(y), dw = to_device(w);
      DeviceBuffer o1(x.size() * sizeof(float)), o2(x.size() * sizeof(float));
      DeviceBuffer q1(x.size()), q2(x.size()), m1(x.size() / 32 * 8), m2(x.size() / 32 * 8);
      add_rms_norm(x1.as<float>(), dy.as<float>(), dw.as<float>(), 1e-6f, rows, n, o1.as<float>(), nullptr);
      quantize_act(o1.as<float>(), rows, n, mode, q1.as<int8_t>(), m1.as<uint2>(), nullptr);
      add_rms_norm_quant({.x = x2.as<float>(), .y = dy.as<float>(), .w = dw.as<float>(), .eps = 1e-6f, .rows = rows,
                          .n = n, .out = o2.as<float>(), .mode = mode, .qs = q2.as<int8_t>(), .meta = m2.as<uint2>()},
                         nullptr);
      EXPECT_TRUE(same_bytes(to_host<float>(x1, x.size()), to_host<float>(x2, x.size()))) << "x";
      EXPECT_TRUE(same_bytes(to_host<float>(o1, x.size()), to_host<float>(o2, x.size()))) << "normed rows";
      EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, x.size()), to_host<int8_t>(q2, x.size()))) << "quants";
      EXPECT_TRUE(same_bytes(to_host<uint2>(m1, x.size() / 32), to_host<uint2>(m2, x.size() / 32))) << "meta";
    }
  }
}

TEST(CudaFused, SwigluPairsQuantEqualsSwigluThenQuantize) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(6);
  for (ActQuant mode : {ActQuant::kQ8_K, ActQuant::kQ8_0}) {
    const int rows = 16, ff = 768;
    const std::vector<float> gu = randn(static_cast<size_t>(rows) * 2 * ff, rng, 3.0f);
    const size_t n = static_cast<size_t>(rows) * ff;
    DeviceBuffer dgu = to_device(gu), o1(n * sizeof(float)), o2(n * sizeof(float));
    DeviceBuffer q1(n), q2(n), m1(n / 32 * 8), m2(n / 32 * 8);
    swiglu_pairs(dgu.as<float>(), rows, ff, o1.as<float>(), nullptr);
    quantize_act(o1.as<float>(), rows, ff, mode, q1.as<int8_t>(), m1.as<uint2>(), nullptr);
    swiglu_pairs_quant(dgu.as<float>(), rows, ff, o2.as<float>(), mode, q2.as<int8_t>(), m2.as<uint2>(), nullptr);
    EXPECT_TRUE(same_bytes(to_host<float>(o1, n), to_host<float>(o2, n))) << "rows, mode " << static_cast<int>(mode);
    EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, n), to_host<int8_t>(q2, n))) << "quants";
    EXPECT_TRUE(same_bytes(to_host<uint2>(m1, n / 32), to_host<uint2>(m2, n / 32))) << "meta";
  }
}

TEST(CudaFused, MoeCombineAddRmsNormEqualsCombineThenNorm) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(8);
  const int T = 3, K = 8, n = 2048;
  for (int variant = 0; variant < 3; ++variant) {  // no shared expert, gated shared, ungated shared
    SCOPED_TRACE(variant);
    const std::vector<float> d = randn(static_cast<size_t>(T) * K * n, rng), wts = randn(static_cast<size_t>(T) * K, rng);
    const std::vector<float> dsh = randn(static_cast<size_t>(T) * n, rng), gate = randn(n, rng, 0.05f);
    const std::vector<float> x = randn(static_cast<size_t>(T) * n, rng, 2.0f), h = randn(x.size(), rng);
    const std::vector<float> w = randn(n, rng);
    DeviceBuffer dd = to_device(d), dw = to_device(wts), dds = to_device(dsh), dg = to_device(gate), dn = to_device(w);
    DeviceBuffer x1 = to_device(x), x2 = to_device(x), h1 = to_device(h), h2 = to_device(h), y(x.size() * sizeof(float));
    const float* shared = variant > 0 ? dds.as<float>() : nullptr;
    const float* gate_inp = variant == 1 ? dg.as<float>() : nullptr;
    for (bool quantize : {false, true}) {
      DeviceBuffer q1(x.size()), q2(x.size()), m1(x.size() / 32 * 8), m2(x.size() / 32 * 8);
      moe_combine({dd.as<float>(), dw.as<float>(), K, shared, gate_inp, h1.as<float>()}, T, n, y.as<float>(), nullptr);
      if (quantize) {
        add_rms_norm_quant({.x = x1.as<float>(), .y = y.as<float>(), .w = dn.as<float>(), .eps = 1e-6f, .rows = T,
                            .n = n, .out = h1.as<float>(), .mode = ActQuant::kQ8_K, .qs = q1.as<int8_t>(),
                            .meta = m1.as<uint2>()},
                           nullptr);
      } else {
        add_rms_norm(x1.as<float>(), y.as<float>(), dn.as<float>(), 1e-6f, T, n, h1.as<float>(), nullptr);
      }
      MoeCombineIn c;
      c.d = dd.as<float>(), c.weights = dw.as<float>(), c.K = K, c.d_sh = shared, c.gate_inp = gate_inp;
      c.h = h2.as<float>();
      moe_combine_add_rms_norm(c,
                               {.x = x2.as<float>(), .w = dn.as<float>(), .eps = 1e-6f, .rows = T, .n = n,
                                .out = h2.as<float>(), .mode = ActQuant::kQ8_K,
                                .qs = quantize ? q2.as<int8_t>() : nullptr, .meta = quantize ? m2.as<uint2>() : nullptr},
                               nullptr);
      EXPECT_TRUE(same_bytes(to_host<float>(x1, x.size()), to_host<float>(x2, x.size()))) << "x, quantize " << quantize;
      EXPECT_TRUE(same_bytes(to_host<float>(h1, x.size()), to_host<float>(h2, x.size()))) << "h, quantize " << quantize;
      if (quantize) {
        EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, x.size()), to_host<int8_t>(q2, x.size()))) << "quants";
        EXPECT_TRUE(same_bytes(to_host<uint2>(m1, x.size() / 32), to_host<uint2>(m2, x.size() / 32))) << "meta";
      }
    }
  }
}

// Rows [r0, r0 + n) of a (rows, width) float buffer on the device.
float* rows_at(const DeviceBuffer& b, int r0, int width) { return b.as<float>() + static_cast<size_t>(r0) * width; }

// A batch of 12 rows takes the 256-thread CTAs, the same rows as decode-sized calls (8 and
// 4 rows) the wide ones: every output byte-equal, for each row kernel.
// (The wide form at 4 and 8 elements per thread, expert counts that fill their load groups
// and ones that do not.)
TEST(CudaFused, WideRowKernelsEqualTheNarrowOnes) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(10);
  const int rows = 12;
  const int pieces[2][2] = {{0, 8}, {8, 4}};  // (first row, rows) of the decode-sized calls
  const float eps = 1e-6f;
  for (int n : {1280, 2048, 3000, 4096, 6144}) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    const size_t size = static_cast<size_t>(rows) * n;
    const std::vector<float> x = randn(size, rng, 2.0f), y = randn(size, rng), w = randn(n, rng);
    DeviceBuffer dy = to_device(y), dw = to_device(w);
    {  // add_rms_norm
      DeviceBuffer x1 = to_device(x), x2 = to_device(x), o1(size * sizeof(float)), o2(size * sizeof(float));
      add_rms_norm(x1.as<float>(), dy.as<float>(), dw.as<float>(), eps, rows, n, o1.as<float>(), nullptr);
      for (const auto& p : pieces) {
        add_rms_norm(rows_at(x2, p[0], n), rows_at(dy, p[0], n), dw.as<float>(), eps, p[1], n, rows_at(o2, p[0], n),
                     nullptr);
      }
      EXPECT_TRUE(same_bytes(to_host<float>(x1, size), to_host<float>(x2, size))) << "add_rms_norm x";
      EXPECT_TRUE(same_bytes(to_host<float>(o1, size), to_host<float>(o2, size))) << "add_rms_norm out";
    }
    for (ActQuant mode : {ActQuant::kQ8_K, ActQuant::kQ8_0}) {  // add_rms_norm_quant
      if (!add_rms_norm_quant_supports(n, mode)) continue;
      SCOPED_TRACE(testing::Message() << "mode " << static_cast<int>(mode));
      DeviceBuffer x1 = to_device(x), x2 = to_device(x), o1(size * sizeof(float)), o2(size * sizeof(float));
      DeviceBuffer q1(size), q2(size), m1(size / 32 * 8), m2(size / 32 * 8);
      add_rms_norm_quant({.x = x1.as<float>(), .y = dy.as<float>(), .w = dw.as<float>(), .eps = eps, .rows = rows,
                          .n = n, .out = o1.as<float>(), .mode = mode, .qs = q1.as<int8_t>(), .meta = m1.as<uint2>()},
                         nullptr);
      for (const auto& p : pieces) {
        const size_t at = static_cast<size_t>(p[0]) * n;
        add_rms_norm_quant({.x = rows_at(x2, p[0], n), .y = rows_at(dy, p[0], n), .w = dw.as<float>(), .eps = eps,
                            .rows = p[1], .n = n, .out = rows_at(o2, p[0], n), .mode = mode,
                            .qs = q2.as<int8_t>() + at, .meta = m2.as<uint2>() + at / 32},
                           nullptr);
      }
      EXPECT_TRUE(same_bytes(to_host<float>(x1, size), to_host<float>(x2, size))) << "x";
      EXPECT_TRUE(same_bytes(to_host<float>(o1, size), to_host<float>(o2, size))) << "normed rows";
      EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, size), to_host<int8_t>(q2, size))) << "quants";
      EXPECT_TRUE(same_bytes(to_host<uint2>(m1, size / 32), to_host<uint2>(m2, size / 32))) << "meta";
    }
  }
  // moe_combine_add_rms_norm: no shared expert, gated shared, ungated shared; quantized or not.
  for (const auto& [n, K] : {std::pair{2048, 8}, std::pair{6144, 6}, std::pair{2048, 10}}) {
    SCOPED_TRACE(testing::Message() << "combine n " << n << " K " << K);
    const size_t size = static_cast<size_t>(rows) * n;
    const std::vector<float> d = randn(size * K, rng), wts = randn(static_cast<size_t>(rows) * K, rng);
    const std::vector<float> dsh = randn(size, rng), gate = randn(n, rng, 0.05f), w = randn(n, rng);
    const std::vector<float> x = randn(size, rng, 2.0f), h = randn(size, rng);
    DeviceBuffer dd = to_device(d), dwt = to_device(wts), dds = to_device(dsh), dg = to_device(gate), dn = to_device(w);
    for (int variant = 0; variant < 3; ++variant) {
      for (bool quantize : {false, true}) {
        SCOPED_TRACE(testing::Message() << "combine variant " << variant << " quantize " << quantize);
        DeviceBuffer x1 = to_device(x), x2 = to_device(x), h1 = to_device(h), h2 = to_device(h);
        DeviceBuffer q1(size), q2(size), m1(size / 32 * 8), m2(size / 32 * 8);
        auto combine = [&](int r0, int count, const DeviceBuffer& xb, const DeviceBuffer& hb, const DeviceBuffer& qb,
                           const DeviceBuffer& mb) {
          const size_t at = static_cast<size_t>(r0) * n;
          MoeCombineIn c;
          c.d = dd.as<float>() + at * K, c.weights = dwt.as<float>() + static_cast<size_t>(r0) * K, c.K = K;
          c.d_sh = variant > 0 ? dds.as<float>() + at : nullptr;
          c.gate_inp = variant == 1 ? dg.as<float>() : nullptr;
          c.h = rows_at(hb, r0, n);
          moe_combine_add_rms_norm(
              c,
              {.x = rows_at(xb, r0, n), .w = dn.as<float>(), .eps = eps, .rows = count, .n = n, .out = rows_at(hb, r0, n),
               .mode = ActQuant::kQ8_K, .qs = quantize ? qb.as<int8_t>() + at : nullptr,
               .meta = quantize ? mb.as<uint2>() + at / 32 : nullptr},
              nullptr);
        };
        combine(0, rows, x1, h1, q1, m1);
        for (const auto& p : pieces) combine(p[0], p[1], x2, h2, q2, m2);
        EXPECT_TRUE(same_bytes(to_host<float>(x1, size), to_host<float>(x2, size))) << "x";
        EXPECT_TRUE(same_bytes(to_host<float>(h1, size), to_host<float>(h2, size))) << "h";
        if (quantize) {
          EXPECT_TRUE(same_bytes(to_host<int8_t>(q1, size), to_host<int8_t>(q2, size))) << "quants";
          EXPECT_TRUE(same_bytes(to_host<uint2>(m1, size / 32), to_host<uint2>(m2, size / 32))) << "meta";
        }
      }
    }
  }
}

TEST(CudaFused, SwigluPairsEqualsSwiglu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  const int rows = 24, ff = 768;
  const std::vector<float> gu = randn(static_cast<size_t>(rows) * 2 * ff, rng, 3.0f);
  std::vector<float> g(static_cast<size_t>(rows) * ff), u(g.size());
  for (int r = 0; r < rows; ++r) {
    std::copy(&gu[static_cast<size_t>(r) * 2 * ff], &gu[static_cast<size_t>(r) * 2 * ff + ff], &g[static_cast<size_t>(r) * ff]);
    std::copy(&gu[static_cast<size_t>(r) * 2 * ff + ff], &gu[static_cast<size_t>(r + 1) * 2 * ff], &u[static_cast<size_t>(r) * ff]);
  }
  DeviceBuffer dg = to_device(g), du = to_device(u), dgu = to_device(gu), out(g.size() * sizeof(float));
  swiglu(dg.as<float>(), du.as<float>(), static_cast<int64_t>(g.size()), nullptr);
  swiglu_pairs(dgu.as<float>(), rows, ff, out.as<float>(), nullptr);
  EXPECT_TRUE(same_bytes(to_host<float>(du, g.size()), to_host<float>(out, g.size())));
}

// Greedy-independent: the same token stream fed to both sequences; the graph path is the
// default, MOETIER_CUDA_GRAPHS=0 gives plain launches.
TEST(CudaFused, GraphDecodeEqualsPlainLaunches) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen2Moe}) {
    const std::string arch_name(arch_info(arch).name);
    SCOPED_TRACE(arch_name);
    auto host = test::load_tiny(arch, "q4_k_m", "graph");
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    auto gpu = CudaModel::load(**host);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    const uint32_t V = (*host)->hparams().n_vocab;
    setenv("MOETIER_CUDA_GRAPHS", "0", 1);
    auto plain = (*gpu)->new_sequence(320);
    unsetenv("MOETIER_CUDA_GRAPHS");
    auto graphed = (*gpu)->new_sequence(320);
    ASSERT_TRUE(plain.ok() && graphed.ok());
    std::vector<float> a, b;
    const int32_t first = 7;
    ASSERT_TRUE((*plain)->feed({&first, 1}, false, &a).ok());
    ASSERT_TRUE((*graphed)->feed({&first, 1}, false, &b).ok());
    double worst = 0;
    for (int step = 1; step < 300; ++step) {
      ASSERT_EQ(a.size(), V);
      ASSERT_EQ(b.size(), V);
      float scale = 0, diff = 0;
      for (uint32_t i = 0; i < V; ++i) {
        scale = std::max(scale, std::fabs(a[i]));
        diff = std::max(diff, std::fabs(a[i] - b[i]));
      }
      worst = std::max(worst, static_cast<double>(diff / scale));
      const int32_t next = static_cast<int32_t>((step * 193 + 11) % V);
      ASSERT_TRUE((*plain)->feed({&next, 1}, false, &a).ok());
      ASSERT_TRUE((*graphed)->feed({&next, 1}, false, &b).ok());
    }
    EXPECT_LE(worst, 1e-5) << "graph vs plain, worst relative difference over 300 positions";
    std::printf("  %s graph vs plain: max rel %.2e over 300 positions\n", arch_name.c_str(), worst);
  }
}

}  // namespace
}  // namespace mt::cuda
