// cuda/kernels/ops.h against the CPU functions each op twins, on random inputs: rms_norm against
// mt::rms_norm, rope against a copy of model/attention.cpp's rope_angles + rope_apply
// (file-local there), kv_store byte-equal to the CPU KvCache, attention within 1e-4
// (relative to the row's largest output) of a double-precision softmax over the same
// cached rows, router_topk against model/ffn.cpp's top-k (ids equal, weights within
// 1e-5), swiglu and moe_combine against their CPU loops, get_rows bit-exact with quant/'s
// dequantize_row, rows_argmax equal to core/row_argmax.h's pick.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/row_argmax.h"
#include "cuda/kernels/mmvq.h"
#include "cuda/kernels/ops.h"
#include "cuda_test_util.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::randn;
using test::to_host;

// |got - want| <= rel * |want| + abs at every index.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + abs)) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
}

// ---- rows_argmax ----

// Rows of a logits-like vocabulary and of odd small widths, with the hard cases planted:
// the maximum twice (the lower index must win, also across threads and warps), -0 beside
// +0 as the maximum, NaN and -inf around the maximum, a row of -inf with one finite value
// last, and rows with no value left (all -inf, all NaN: -1).
TEST(CudaOps, RowsArgmaxIsTheScalarPick) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int n : {151936, 1000, 33, 1}) {
    const int rows = 9;
    std::vector<float> x = randn(static_cast<size_t>(rows) * n, rng, 4.0f);
    auto row = [&](int r) { return x.data() + static_cast<size_t>(r) * n; };
    std::uniform_int_distribution<int> at(0, n - 1);
    if (n > 1) {
      const int a = at(rng), b = at(rng);  // row 1: the maximum at two places
      row(1)[a] = row(1)[b] = 100.0f;
      row(2)[at(rng)] = nan;               // row 2: NaN beside the maximum
      row(2)[at(rng)] = 50.0f;
      std::fill(row(3), row(3) + n, 0.0f);  // row 3: all zeros, -0 first: index 0
      row(3)[0] = -0.0f;
      for (int j = 0; j < n; ++j) row(4)[j] = j % 2 == 0 ? -inf : nan;  // row 4: nothing left
      std::fill(row(5), row(5) + n, -inf);  // row 5: one finite value, the last
      row(5)[n - 1] = -1e30f;
      std::fill(row(6), row(6) + n, -inf);  // row 6: every token masked
      row(7)[n - 1] = row(7)[0] = 1e9f;     // row 7: the first and the last tie
    }
    DeviceBuffer dx = to_device(x), dout(rows * sizeof(int32_t));
    rows_argmax(dx.as<float>(), rows, n, dout.as<int32_t>(), nullptr);
    const std::vector<int32_t> got = to_host<int32_t>(dout, rows);
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(got[r], row_argmax({row(r), static_cast<size_t>(n)})) << "n " << n << " row " << r;
    }
    if (n > 1) {
      EXPECT_EQ(got[3], 0);
      EXPECT_EQ(got[4], -1);
      EXPECT_EQ(got[5], n - 1);
      EXPECT_EQ(got[6], -1);
      EXPECT_EQ(got[7], 0);
    }
  }
}

// ---- rms_norm, rope, add ----

TEST(CudaOps, RmsNormMatchesCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(1);
  const float eps = 1e-6f;
  for (int n : {64, 1000, 4096}) {
    for (bool weighted : {true, false}) {
      const int rows = 7;
      const std::vector<float> x = randn(static_cast<size_t>(rows) * n, rng, 3.0f);
      const std::vector<float> w = weighted ? randn(n, rng) : std::vector<float>{};
      std::vector<float> want(x.size());
      for (int r = 0; r < rows; ++r) mt::rms_norm(&x[r * n], w, eps, n, &want[r * n]);
      DeviceBuffer dx = to_device(x), dout(x.size() * sizeof(float));
      DeviceBuffer dw = to_device(weighted ? w : std::vector<float>{0.0f});
      rms_norm({dx.as<float>(), n, weighted ? dw.as<float>() : nullptr, eps, rows, n, dout.as<float>(), n}, nullptr);
      expect_close(to_host<float>(dout, x.size()), want, 1e-6f, 1e-7f, "rms_norm rows");
    }
  }
  // Per-head, in place: rows = tokens * heads, n = head_dim.
  {
    const int T = 5, H = 6, D = 128;
    const std::vector<float> x = randn(static_cast<size_t>(T) * H * D, rng, 2.0f);
    const std::vector<float> w = randn(D, rng);
    std::vector<float> want(x.size());
    for (int r = 0; r < T * H; ++r) mt::rms_norm(&x[r * D], w, eps, D, &want[r * D]);
    DeviceBuffer dx = to_device(x), dw = to_device(w);
    rms_norm({dx.as<float>(), D, dw.as<float>(), eps, T * H, D, dx.as<float>(), D}, nullptr);
    expect_close(to_host<float>(dx, x.size()), want, 1e-6f, 1e-7f, "rms_norm per head in place");
  }
  // Strided rows: x rows 24 floats wider than n, out rows 8 wider; the padding untouched.
  {
    const int rows = 9, n = 320, xs = n + 24, os = n + 8;
    const std::vector<float> x = randn(static_cast<size_t>(rows) * xs, rng);
    const std::vector<float> w = randn(n, rng);
    std::vector<float> want(static_cast<size_t>(rows) * os, -7.0f);
    for (int r = 0; r < rows; ++r) mt::rms_norm(&x[r * xs], w, eps, n, &want[r * os]);
    DeviceBuffer dx = to_device(x), dw = to_device(w);
    DeviceBuffer dout = to_device(std::vector<float>(want.size(), -7.0f));
    rms_norm({dx.as<float>(), xs, dw.as<float>(), eps, rows, n, dout.as<float>(), os}, nullptr);
    expect_close(to_host<float>(dout, want.size()), want, 1e-6f, 1e-7f, "rms_norm strided");
  }
}

// model/attention.cpp rope_angles + rope_apply, per token (they are file-local there).
void rope_reference(std::vector<float>& x, int T, int H, int D, int n_rot, uint32_t pos0, float base, float scale,
                    bool neox) {
  std::vector<float> c(n_rot / 2), s(n_rot / 2);
  for (int t = 0; t < T; ++t) {
    const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
    float theta = static_cast<float>(pos0 + static_cast<uint32_t>(t)) * scale;
    for (int k = 0; k < n_rot / 2; ++k) {
      c[k] = std::cos(theta);
      s[k] = std::sin(theta);
      theta *= theta_scale;
    }
    for (int h = 0; h < H; ++h) {
      float* head = &x[(static_cast<size_t>(t) * H + h) * D];
      for (int k = 0; k < n_rot / 2; ++k) {
        const int i0 = neox ? k : 2 * k, i1 = neox ? k + n_rot / 2 : 2 * k + 1;
        const float x0 = head[i0], x1 = head[i1];
        head[i0] = x0 * c[k] - x1 * s[k];
        head[i1] = x0 * s[k] + x1 * c[k];
      }
    }
  }
}

TEST(CudaOps, RopeMatchesCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  struct Case {
    int D, n_rot;
    uint32_t pos0;
    float base, scale;
    bool neox;
  };
  const Case cases[] = {{128, 64, 1000, 10000.0f, 1.0f, false}, {128, 128, 0, 1000000.0f, 1.0f, true},
                        {64, 32, 12345, 500000.0f, 0.25f, true}, {256, 64, 300, 10000.0f, 1.0f, false},
                        {256, 256, 7, 10000000.0f, 1.0f, true}};
  std::mt19937 rng(2);
  for (const Case& c : cases) {
    const int T = 6, H = 4;
    std::vector<float> x = randn(static_cast<size_t>(T) * H * c.D, rng);
    DeviceBuffer dx = to_device(x);
    rope_reference(x, T, H, c.D, c.n_rot, c.pos0, c.base, c.scale, c.neox);
    rope(dx.as<float>(), T, H, c.D, {c.n_rot, c.pos0, c.base, c.scale, c.neox}, nullptr);
    expect_close(to_host<float>(dx, x.size()), x, 2e-6f, 2e-6f, c.neox ? "rope neox" : "rope norm");
  }
}

TEST(CudaOps, AddAndBias) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  const int rows = 5, n = 777;
  std::vector<float> y = randn(static_cast<size_t>(rows) * n, rng);
  const std::vector<float> b = randn(n, rng), x = randn(y.size(), rng);
  DeviceBuffer dy = to_device(y), db = to_device(b), dx = to_device(x);
  add_bias(dy.as<float>(), db.as<float>(), rows, n, nullptr);
  add(dy.as<float>(), dx.as<float>(), static_cast<int64_t>(y.size()), nullptr);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) y[r * n + i] = (y[r * n + i] + b[i]) + x[r * n + i];
  }
  expect_close(to_host<float>(dy, y.size()), y, 0.0f, 0.0f, "add_bias + add");
}

// ---- KV cache ----

TEST(CudaOps, KvStoreBytesEqualCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(4);
  const int kv_dim = 256, T = 5;
  const uint32_t n_ctx = 20, pos0 = 7;
  for (QuantType type : {QuantType::F16, QuantType::Q8_0, QuantType::F32}) {
    std::vector<float> k = randn(static_cast<size_t>(T) * kv_dim, rng, 2.0f);
    std::vector<float> v = randn(k.size(), rng, 0.5f);
    // Edge blocks: all zero; exact .5 ties at d = 1 (amax 127); a scale whose inverse
    // overflows (codes 0); a scale past the half range; F16 overflow and subnormals.
    std::fill(k.begin(), k.begin() + 32, 0.0f);
    for (int j = 0; j < 32; ++j) k[32 + j] = static_cast<float>(j - 16) + 0.5f;
    k[32 + 31] = 127.0f;
    for (int j = 0; j < 32; ++j) k[kv_dim + 64 + j] = (j % 2 ? 1e-39f : -3e-40f);
    for (int j = 0; j < 32; ++j) k[kv_dim + 96 + j] = 1e7f * static_cast<float>(j - 15);
    const float specials[] = {70000.0f, 65519.0f, 65520.0f, -65504.0f, 1e-6f, -3e-8f, -0.0f, 6.1e-5f};
    for (int j = 0; j < 8; ++j) k[2 * kv_dim + 128 + j] = specials[j];

    auto cache = KvCache::create(1, n_ctx, kv_dim, type);
    ASSERT_TRUE(cache.ok());
    const uint64_t rb = cache->row_bytes();
    std::vector<uint8_t> want_k(n_ctx * rb, 0xAB), want_v(n_ctx * rb, 0xAB);
    for (int t = 0; t < T; ++t) {
      cache->store(0, pos0 + t, &k[t * kv_dim], &v[t * kv_dim]);
      std::memcpy(&want_k[(pos0 + t) * rb], cache->k_row(0, pos0 + t), rb);
      std::memcpy(&want_v[(pos0 + t) * rb], cache->v_row(0, pos0 + t), rb);
    }
    DeviceBuffer dk = to_device(k), dv = to_device(v);
    DeviceBuffer ck = to_device(std::vector<uint8_t>(n_ctx * rb, 0xAB));
    DeviceBuffer cv = to_device(std::vector<uint8_t>(n_ctx * rb, 0xAB));
    kv_store(type, dk.as<float>(), T, kv_dim, ck.as<uint8_t>(), rb, pos0, nullptr);
    kv_store(type, dv.as<float>(), T, kv_dim, cv.as<uint8_t>(), rb, pos0, nullptr);
    EXPECT_TRUE(to_host<uint8_t>(ck, want_k.size()) == want_k) << "K bytes, " << type_name(type);
    EXPECT_TRUE(to_host<uint8_t>(cv, want_v.size()) == want_v) << "V bytes, " << type_name(type);
  }
}

// Causal GQA attention over a cache filled by the CPU's KvCache, against a double softmax
// over the same dequantized rows (q in f32, as the device reads it).
// quant set: the output rows also quantized in that mode (AttentionArgs quant_qs), twice
// over (the block counters left zeroed for the next call), byte-equal to quantize_act of
// the f32 output wherever attention() says it quantized, which it must where want_quant.
struct AttnQuantCheck {
  ActQuant mode;
  bool want_quant;
};
void check_attention(QuantType type, int D, int T, uint32_t pos0, int n_head, int n_head_kv, uint32_t seed,
                     uint32_t warp_max = 0, bool warp_lanes = false, const AttnQuantCheck* quant = nullptr) {
  SCOPED_TRACE(::testing::Message() << type_name(type) << " head_dim " << D << " n_tokens " << T << " pos0 " << pos0
                                    << " warp_max " << warp_max << " lanes " << warp_lanes << " quant "
                                    << (quant != nullptr ? static_cast<int>(quant->mode) : -1));
  std::mt19937 rng(seed);
  const int kv_dim = n_head_kv * D;
  const uint32_t n_kv = pos0 + static_cast<uint32_t>(T);
  auto cache = KvCache::create(1, n_kv, kv_dim, type);
  ASSERT_TRUE(cache.ok());
  for (uint32_t p = 0; p < n_kv; ++p) {
    const std::vector<float> k = randn(kv_dim, rng), v = randn(kv_dim, rng);
    cache->store(0, p, k.data(), v.data());
  }
  const std::vector<float> q = randn(static_cast<size_t>(T) * n_head * D, rng, 1.5f);
  const uint64_t rb = cache->row_bytes();
  std::vector<uint8_t> kb(cache->k_row(0, 0), cache->k_row(0, 0) + n_kv * rb);
  std::vector<uint8_t> vb(cache->v_row(0, 0), cache->v_row(0, 0) + n_kv * rb);
  DeviceBuffer dq = to_device(q), dk = to_device(kb), dv = to_device(vb);
  DeviceBuffer dout(q.size() * sizeof(float));
  Workspace ws(attention_workspace_bytes(T, n_head, D, n_kv));
  AttentionArgs a;
  a.q = dq.as<float>();
  a.k_cache = dk.as<uint8_t>();
  a.v_cache = dv.as<uint8_t>();
  a.kv_type = type;
  a.kv_row_bytes = rb;
  a.n_tokens = T;
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = D;
  a.pos0 = pos0;
  a.out = dout.as<float>();
  a.warp_max = warp_max;
  a.warp_lanes = warp_lanes;
  const size_t row = static_cast<size_t>(n_head) * D;
  DeviceBuffer qs(T * row), qm(T * row / 32 * sizeof(uint2)), counters(sizeof(uint32_t) * kAttnDecodeCounters);
  if (quant != nullptr) {
    MT_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    a.quant_qs = qs.as<int8_t>(), a.quant_meta = qm.as<uint2>(), a.quant_mode = quant->mode;
    a.quant_counters = counters.as<uint32_t>();
  }
  for (int call = 0; call < (quant != nullptr ? 2 : 1); ++call) {
    if (quant != nullptr) {
      MT_CUDA_CHECK(cudaMemset(qs.get(), 0x5A, qs.bytes()));
      MT_CUDA_CHECK(cudaMemset(qm.get(), 0x5A, qm.bytes()));
    }
    ws.reset();  // (each call's partials taken afresh)
    const bool quantized = attention(a, ws, nullptr);
    MT_CUDA_CHECK(cudaDeviceSynchronize());
    if (quant == nullptr) {
      EXPECT_FALSE(quantized);
      continue;
    }
    EXPECT_EQ(quantized, quant->want_quant) << "call " << call;
    if (!quantized) continue;
    DeviceBuffer wq(T * row), wm(T * row / 32 * sizeof(uint2));
    quantize_act(dout.as<float>(), T, static_cast<int>(row), quant->mode, wq.as<int8_t>(), wm.as<uint2>(), nullptr);
    EXPECT_TRUE(to_host<int8_t>(qs, T * row) == to_host<int8_t>(wq, T * row)) << "quants, call " << call;
    EXPECT_TRUE(to_host<uint64_t>(qm, T * row / 32) == to_host<uint64_t>(wm, T * row / 32)) << "metas, call " << call;
    EXPECT_TRUE(to_host<uint32_t>(counters, kAttnDecodeCounters) == std::vector<uint32_t>(kAttnDecodeCounters, 0u));
  }
  const std::vector<float> got = to_host<float>(dout, q.size());

  std::vector<float> kf(static_cast<size_t>(n_kv) * kv_dim), vf(kf.size());
  for (uint32_t p = 0; p < n_kv; ++p) {
    cache->load_k(0, p, &kf[p * kv_dim]);
    cache->load_v(0, p, &vf[p * kv_dim]);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int group = n_head / n_head_kv;
  int bad = 0;
  for (int t = 0; t < T && bad < 5; ++t) {
    for (int h = 0; h < n_head && bad < 5; ++h) {
      const float* qr = &q[(static_cast<size_t>(t) * n_head + h) * D];
      const size_t off = static_cast<size_t>(h / group) * D;
      const uint32_t len = pos0 + static_cast<uint32_t>(t) + 1;
      std::vector<double> s(len), o(D, 0.0);
      double mx = -INFINITY, sum = 0.0;
      for (uint32_t j = 0; j < len; ++j) {
        double dot = 0.0;
        for (int e = 0; e < D; ++e) dot += static_cast<double>(qr[e]) * kf[j * kv_dim + off + e];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (uint32_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (uint32_t j = 0; j < len; ++j) {
        for (int e = 0; e < D; ++e) o[e] += s[j] / sum * vf[j * kv_dim + off + e];
      }
      double omax = 0.0;
      for (int e = 0; e < D; ++e) omax = std::max(omax, std::fabs(o[e]));
      const float* g = &got[(static_cast<size_t>(t) * n_head + h) * D];
      // F16-cache prefill with head_dim 64/128/256 runs on tensor cores with q and the
      // softmax weights rounded to f16 (as the CPU's F16 path rounds q): its bound against
      // this unrounded double softmax is attention_tc_test.cpp's reasoning, 5e-3 per row.
      const bool tensor_cores = type == QuantType::F16 && T > 8 && (D == 64 || D == 128 || D == 256);
      const double tol = tensor_cores ? 5e-3 : 1e-4;
      for (int e = 0; e < D; ++e) {
        if (!(std::fabs(g[e] - o[e]) <= tol * omax + 1e-7)) {
          ADD_FAILURE() << "token " << t << " head " << h << " [" << e << "]: got " << g[e] << " want " << o[e];
          ++bad;
          break;
        }
      }
    }
  }
}

TEST(CudaOps, AttentionMatchesReference) {
  MT_SKIP_WITHOUT_DEVICE();
  uint32_t seed = 100;
  for (QuantType type : {QuantType::F16, QuantType::Q8_0}) {
    for (int D : {64, 128, 256}) {
      for (int T : {1, 5, 70}) {
        for (uint32_t pos0 : {0u, 300u}) check_attention(type, D, T, pos0, 8, 2, ++seed);
      }
    }
  }
}

TEST(CudaOps, AttentionEdgeShapes) {
  MT_SKIP_WITHOUT_DEVICE();
  check_attention(QuantType::F32, 128, 5, 300, 8, 2, 1);     // F32 cache, decode
  check_attention(QuantType::F32, 128, 70, 0, 8, 2, 2);      // F32 cache, prefill
  check_attention(QuantType::F16, 80, 3, 41, 4, 4, 3);       // head_dim not a multiple of 32, no GQA
  check_attention(QuantType::F16, 80, 40, 41, 4, 4, 4);
  check_attention(QuantType::Q8_0, 128, 1, 3000, 16, 4, 5);  // long context: many decode chunks
  check_attention(QuantType::F16, 128, 8, 1000, 32, 4, 6);   // the largest decode batch, GQA 8:1
  check_attention(QuantType::F16, 128, 9, 0, 4, 1, 7);       // the smallest prefill batch, MQA
  check_attention(QuantType::Q8_0, 256, 33, 5, 2, 1, 8);     // one query past a tile
  check_attention(QuantType::F16, 128, 2, 500, 12, 1, 9);    // a group of 12: blocks of 8 and 4 heads
  check_attention(QuantType::Q8_0, 64, 4, 200, 32, 2, 10);   // a group of 16: two blocks per KV head
}

// The warps kernel (AttentionArgs warp_max): one chunk up to 256 positions (its own
// output, no merge launch), chunks of 256 past it (merged by the combine kernel), every
// KV type and head_dim it takes, GQA groups of 1 to 16, decode batches of 1 to 8.
// The lanes form (warp_lanes) too, at lengths around its 32-position rounds.
TEST(CudaOps, AttentionWarpsKernelMatchesReference) {
  MT_SKIP_WITHOUT_DEVICE();
  uint32_t seed = 500;
  for (bool lanes : {false, true}) {
    for (QuantType type : {QuantType::F16, QuantType::Q8_0, QuantType::F32}) {
      for (int D : {64, 128, 256}) {
        for (uint32_t pos0 : {0u, 6u, 31u, 32u, 100u, 255u, 300u, 1100u}) {
          check_attention(type, D, 1, pos0, 8, 2, ++seed, 4096, lanes);
        }
      }
    }
    check_attention(QuantType::F16, 128, 5, 250, 32, 4, ++seed, 4096, lanes);  // one chunk, then two, in the batch
    check_attention(QuantType::F16, 128, 8, 40, 16, 1, ++seed, 4096, lanes);   // a group of 16
    check_attention(QuantType::Q8_0, 128, 3, 2, 4, 4, ++seed, 4096, lanes);    // no GQA, 3 positions for 4 warps
    check_attention(QuantType::F16, 128, 1, 600, 32, 4, ++seed, 512, lanes);   // above warp_max: the grouped kernel
  }
}

// The warps kernel's output rows quantized in the launch (AttentionArgs quant_qs, wo's
// activation rows): every mode, blocks within a head (Q8_0 / Q8_1; Q8_K at head_dim 256)
// and heads within a block (Q8_K at 64 / 128: the last CTA of the block), decode batches;
// not where the kernel takes several chunks or another kernel runs.
TEST(CudaOps, AttentionQuantizesItsOutputRowsAsQuantizeAct) {
  MT_SKIP_WITHOUT_DEVICE();
  uint32_t seed = 900;
  for (ActQuant mode : {ActQuant::kQ8_0, ActQuant::kQ8_1, ActQuant::kQ8_K}) {
    const AttnQuantCheck yes{mode, true}, no{mode, false};
    for (QuantType type : {QuantType::F16, QuantType::Q8_0}) {
      for (int D : {64, 128, 256}) {
        check_attention(type, D, 1, 40, 8, 2, ++seed, 4096, false, &yes);
        check_attention(type, D, 1, 40, 8, 2, ++seed, 4096, true, &yes);
      }
    }
    check_attention(QuantType::F16, 128, 8, 100, 32, 4, ++seed, 4096, false, &yes);  // 8 tokens, 32 heads (16 Q8_K blocks)
    check_attention(QuantType::F16, 64, 3, 7, 16, 16, ++seed, 4096, false, &yes);    // 4 heads per Q8_K block
    check_attention(QuantType::F16, 128, 1, 300, 8, 2, ++seed, 4096, false, &no);    // two chunks: merged, not quantized
    check_attention(QuantType::F16, 128, 1, 40, 8, 2, ++seed, 0, false, &no);        // the grouped kernel
  }
}

// ---- MoE ----

// model/ffn.cpp moe_block's router: softmax, top-k by probability (ties: lower id).
void topk_reference(const std::vector<float>& logits, int T, int X, int K, bool renorm, std::vector<int32_t>& ids,
                    std::vector<float>& w) {
  ids.assign(static_cast<size_t>(T) * K, 0);
  w.assign(ids.size(), 0.0f);
  std::vector<int32_t> order(X);
  for (int t = 0; t < T; ++t) {
    std::vector<float> p(logits.begin() + static_cast<size_t>(t) * X, logits.begin() + static_cast<size_t>(t + 1) * X);
    mt::softmax(p.data(), p.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t i, int32_t j) { return p[i] > p[j] || (p[i] == p[j] && i < j); });
    float sum = 0.0f;
    for (int i = 0; i < K; ++i) {
      ids[t * K + i] = order[i];
      w[t * K + i] = p[order[i]];
      sum += p[order[i]];
    }
    if (renorm) {
      sum = std::max(sum, 6.103515625e-5f);
      for (int i = 0; i < K; ++i) w[t * K + i] /= sum;
    }
  }
}

TEST(CudaOps, RouterTopkMatchesCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  const int T = 37;  // not a multiple of the tokens per block
  for (int X : {8, 60, 128, 200, 256, 512}) {  // (registers up to 256, shared memory past it)
    for (int K : {2, 4, 8, 10}) {
      if (K > X) continue;
      for (bool renorm : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n_expert " << X << " K " << K << " renormalize " << renorm);
        std::vector<float> logits = randn(static_cast<size_t>(T) * X, rng, 2.0f);
        std::fill(logits.begin() + X, logits.begin() + 2 * X, 0.25f);  // token 1: all tied
        for (int t = 3; t < T; t += 3) {  // exact ties at the top
          for (int e : {X - 1, X / 2, 1}) logits[static_cast<size_t>(t) * X + e] = 9.0f;
        }
        std::vector<int32_t> want_ids;
        std::vector<float> want_w;
        topk_reference(logits, T, X, K, renorm, want_ids, want_w);
        DeviceBuffer dl = to_device(logits), di(want_ids.size() * sizeof(int32_t)), dw(want_w.size() * sizeof(float));
        router_topk(dl.as<float>(), T, X, K, renorm, di.as<int32_t>(), dw.as<float>(), nullptr);
        EXPECT_EQ(to_host<int32_t>(di, want_ids.size()), want_ids);
        expect_close(to_host<float>(dw, want_w.size()), want_w, 0.0f, 1e-5f, "router weights");
      }
    }
  }
}

float silu_reference(float x) { return x / (1.0f + std::exp(-x)); }

TEST(CudaOps, SwigluMatchesCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(6);
  const size_t n = 10007;
  std::vector<float> g = randn(n, rng, 4.0f), u = randn(n, rng, 2.0f);
  g[0] = -100.0f;
  g[1] = 100.0f;
  u[2] = -95.0f;
  for (bool gated : {true, false}) {
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = gated ? silu_reference(g[i]) * u[i] : silu_reference(u[i]);
    DeviceBuffer dg = to_device(g), du = to_device(u);
    swiglu(gated ? dg.as<float>() : nullptr, du.as<float>(), static_cast<int64_t>(n), nullptr);
    expect_close(to_host<float>(du, n), want, 2e-6f, 1e-30f, gated ? "swiglu" : "silu");
  }
}

TEST(CudaOps, MoeCombineMatchesCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  const int T = 6, K = 4, n = 300;
  const std::vector<float> d = randn(static_cast<size_t>(T) * K * n, rng), w = randn(static_cast<size_t>(T) * K, rng);
  const std::vector<float> d_sh = randn(static_cast<size_t>(T) * n, rng), h = randn(d_sh.size(), rng);
  const std::vector<float> gate_inp = randn(n, rng, 0.1f);
  DeviceBuffer dd = to_device(d), dw = to_device(w), dsh = to_device(d_sh), dh = to_device(h);
  DeviceBuffer dgi = to_device(gate_inp);
  for (bool shared : {false, true}) {
    std::vector<float> want(static_cast<size_t>(T) * n, 0.0f);
    for (int t = 0; t < T; ++t) {
      float* o = &want[static_cast<size_t>(t) * n];
      for (int k = 0; k < K; ++k) {
        const float wt = w[t * K + k];
        const float* dr = &d[(static_cast<size_t>(t) * K + k) * n];
        for (int j = 0; j < n; ++j) o[j] += dr[j] * wt;
      }
      if (shared) {
        double z = 0.0;
        for (int j = 0; j < n; ++j) z += static_cast<double>(gate_inp[j]) * h[t * n + j];
        const float gate = 1.0f / (1.0f + std::exp(-static_cast<float>(z)));
        for (int j = 0; j < n; ++j) o[j] += d_sh[t * n + j] * gate;
      }
    }
    DeviceBuffer dout(want.size() * sizeof(float));
    const MoeCombineIn in{dd.as<float>(), dw.as<float>(), K, shared ? dsh.as<float>() : nullptr,
                          shared ? dgi.as<float>() : nullptr, shared ? dh.as<float>() : nullptr};
    moe_combine(in, T, n, dout.as<float>(), nullptr);
    expect_close(to_host<float>(dout, want.size()), want, shared ? 1e-5f : 1e-6f, 1e-6f, "moe_combine");
  }
}

// ---- get_rows ----

TEST(CudaOps, GetRowsBitExact) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(8);
  const int n = 512, n_rows = 10;
  const std::vector<int32_t> ids = {3, 0, 9, 3, 7};
  for (QuantType type : {QuantType::F32, QuantType::F16, QuantType::BF16, QuantType::Q8_0, QuantType::Q4_0,
                         QuantType::Q5_1, QuantType::Q4_K, QuantType::Q6_K, QuantType::IQ4_XS, QuantType::MXFP4}) {
    if (!has_quantize(type)) continue;
    SCOPED_TRACE(type_name(type));
    const uint64_t rb = *row_bytes(type, n);
    const std::vector<float> x = randn(static_cast<size_t>(n_rows) * n, rng);
    std::vector<uint8_t> table(n_rows * rb);
    for (int r = 0; r < n_rows; ++r) quantize_row(type, &x[r * n], &table[r * rb], n);
    std::vector<float> want(ids.size() * n);
    for (size_t i = 0; i < ids.size(); ++i) dequantize_row(type, &table[ids[i] * rb], &want[i * n], n);
    DeviceBuffer dt = to_device(table), di = to_device(ids), dout(want.size() * sizeof(float));
    get_rows(type, dt.as<uint8_t>(), rb, di.as<int32_t>(), static_cast<int>(ids.size()), n, dout.as<float>(), nullptr);
    const std::vector<float> got = to_host<float>(dout, want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace mt::cuda
