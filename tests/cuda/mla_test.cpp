// cuda/kernels/ops_mla.h against scalar CPU references: mla_attention within 1e-4 (relative to
// the (token, head)'s largest output) of a double-precision causal softmax over the same
// cached latent rows, with q rounded to the cache's activation type as the CPU rounds it
// and, for F16 caches, each probability rounded to F16 before the value sum as the CPU
// rounds it (there the bound also allows one F16 step of the largest probability times
// the largest value: the device's float softmax and this double one may round a
// probability lying within ~1e-6 of an F16 boundary to neighbouring values)
// (R = 128 / P = 32, the tiny models, and R = 512 / P = 64, DeepSeek's; 1, 7 and 40 tokens
// at positions 0 and 33; F16, F32 and Q8_0 caches; decode batches also with the position
// read on the device, the split sized for a larger capacity); mla_prep against
// model/attention.cpp's rms_norm + rope_angles (YaRN and plain) + rope_apply (NORM) and the
// reference quantizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/kernel_params.h"
#include "cuda/kernels/ops_mla.h"
#include "cuda_test_util.h"
#include "model/attend.h"
#include "model/layers.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using test::randn;
using test::to_device;
using test::to_host;

// Latent rows (n, L) as a cache of `type`: the bytes, and the values they dequantize to.
struct HostCache {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  uint64_t row_bytes = 0;
};

HostCache make_cache(QuantType type, const std::vector<float>& rows, int n, int L) {
  HostCache c;
  c.row_bytes = *row_bytes(type, static_cast<uint64_t>(L));
  c.bytes.resize(c.row_bytes * n);
  c.values.resize(static_cast<size_t>(n) * L);
  for (int j = 0; j < n; ++j) {
    uint8_t* dst = &c.bytes[j * c.row_bytes];
    if (type == QuantType::F32) {
      std::memcpy(dst, &rows[static_cast<size_t>(j) * L], c.row_bytes);
    } else {
      quantize_row(type, &rows[static_cast<size_t>(j) * L], dst, L);
    }
    dequantize_row(type, dst, &c.values[static_cast<size_t>(j) * L], L);
  }
  return c;
}

// q rounded as the CPU rounds it before the K dots (its activation type for the cache).
std::vector<float> round_query(QuantType cache, const std::vector<float>& q) {
  if (cache == QuantType::F32) return q;
  const uint64_t rb = *row_bytes(cache, q.size());
  std::vector<uint8_t> packed(rb);
  std::vector<float> out(q.size());
  quantize_row(cache, q.data(), packed.data(), static_cast<int64_t>(q.size()));
  dequantize_row(cache, packed.data(), out.data(), static_cast<int64_t>(q.size()));
  return out;
}

const char* name_of(QuantType t) { return t == QuantType::F16 ? "f16" : t == QuantType::F32 ? "f32" : "q8_0"; }

TEST(CudaMla, AttentionMatchesAScalarReference) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  struct Shape {
    int R, P, H;
  };
  for (const Shape sh : {Shape{128, 32, 12}, Shape{512, 64, 16}}) {
    const int R = sh.R, P = sh.P, H = sh.H, L = R + P;
    const float scale = 1.3f / std::sqrt(static_cast<float>(P + 128));
    for (QuantType kv : {QuantType::F16, QuantType::F32, QuantType::Q8_0}) {
      for (int T : {1, 7, 40}) {
        for (uint32_t pos0 : {0u, 33u}) {
          SCOPED_TRACE(testing::Message() << "R " << R << " P " << P << " " << name_of(kv) << " T " << T << " pos0 " << pos0);
          const int n = static_cast<int>(pos0) + T;
          const HostCache cache = make_cache(kv, randn(static_cast<size_t>(n) * L, rng), n, L);
          const std::vector<float> q_lat = randn(static_cast<size_t>(T) * H * R, rng);
          const std::vector<float> q_pe = randn(static_cast<size_t>(T) * H * P, rng);

          // Reference: per (t, h) the rounded [q_lat | q_pe], scores over [0, pos0 + t], softmax and sum in double.
          std::vector<float> want(static_cast<size_t>(T) * H * R);
          for (int t = 0; t < T; ++t) {
            for (int h = 0; h < H; ++h) {
              const size_t slot = static_cast<size_t>(t) * H + h;
              std::vector<float> q(L);
              std::copy_n(&q_lat[slot * R], R, q.begin());
              std::copy_n(&q_pe[slot * P], P, q.begin() + R);
              q = round_query(kv, q);
              const int n_kv = static_cast<int>(pos0) + t + 1;
              std::vector<double> s(n_kv);
              double mx = -INFINITY;
              for (int j = 0; j < n_kv; ++j) {
                double d = 0;
                for (int e = 0; e < L; ++e) d += static_cast<double>(q[e]) * cache.values[static_cast<size_t>(j) * L + e];
                s[j] = d * scale;
                mx = std::max(mx, s[j]);
              }
              double sum = 0;
              for (double& v : s) sum += (v = std::exp(v - mx));
              if (kv == QuantType::F16) {  // p = f16(e^(s - max) / sum), as the CPU's softmax then rounding
                const float inv = static_cast<float>(1.0 / sum);
                for (double& v : s) v = fp16_to_fp32(fp32_to_fp16(static_cast<float>(v) * inv));
                sum = 1.0;
              }
              for (int e = 0; e < R; ++e) {
                double o = 0;
                for (int j = 0; j < n_kv; ++j) o += s[j] * cache.values[static_cast<size_t>(j) * L + e];
                want[slot * R + e] = static_cast<float>(o / sum);
              }
            }
          }

          DeviceBuffer d_cache = to_device(cache.bytes), d_lat = to_device(q_lat), d_pe = to_device(q_pe);
          DeviceBuffer d_pos = to_device(std::vector<uint32_t>{pos0});
          DeviceBuffer d_out(want.size() * sizeof(float));
          // Host position; for decode batches also the graph form (position on the device,
          // the split sized for 300 more positions than needed).
          for (bool on_device : {false, true}) {
            if (on_device && T > kMlaDecodeMaxTokens) continue;
            MlaAttentionArgs a;
            a.q_lat = d_lat.as<float>(), a.q_pe = d_pe.as<float>();
            a.cache = d_cache.as<uint8_t>(), a.kv_type = kv, a.row_bytes = cache.row_bytes;
            a.n_tokens = T, a.n_head = H, a.R = R, a.P = P, a.scale = scale;
            a.pos0 = on_device ? 12345u : pos0;  // ignored with pos_dev
            a.pos_dev = on_device ? d_pos.as<uint32_t>() : nullptr;
            a.n_kv_cap = on_device ? static_cast<uint32_t>(n) + 300 : 0;
            a.out = d_out.as<float>();
            Workspace ws(mla_attention_workspace_bytes(T, H, R));
            MT_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));  // NaNs where nothing is written
            mla_attention(a, ws, nullptr);
            const std::vector<float> got = to_host<float>(d_out, want.size());
            int bad = 0;
            float vmax = 0;  // the largest cached latent value
            for (int j = 0; j < n; ++j) {
              for (int e = 0; e < R; ++e) vmax = std::max(vmax, std::fabs(cache.values[static_cast<size_t>(j) * L + e]));
            }
            const float flip = kv == QuantType::F16 ? std::ldexp(1.0f, -11) * vmax : 0.0f;
            for (size_t slot = 0; slot < static_cast<size_t>(T) * H && bad < 5; ++slot) {
              float mx = 0;
              for (int e = 0; e < R; ++e) mx = std::max(mx, std::fabs(want[slot * R + e]));
              for (int e = 0; e < R && bad < 5; ++e) {
                const float g = got[slot * R + e], w = want[slot * R + e];
                if (!(std::fabs(g - w) <= 1e-4f * mx + flip)) {
                  ADD_FAILURE() << (on_device ? "device position" : "host position") << " token " << slot / H << " head "
                                << slot % H << " dim " << e << ": got " << g << " want " << w;
                  ++bad;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(CudaMla, PrepMatchesTheCpu) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(11);
  const int R = 128, P = 32, nope = 32, H = 4, T = 7, L = R + P, QK = nope + P;
  const uint32_t pos0 = 33;
  for (bool yarn : {true, false}) {
    HParams hp;
    hp.rms_eps = 1e-6f;
    hp.rope_freq_base = 10000.0f;
    if (yarn) {  // deepseek2's YaRN 40x over 4096 (the tiny model's)
      hp.rope_freq_scale = 1.0f / 40.0f;
      hp.yarn_ext = 1.0f;
      hp.n_ctx_orig = 4096;
      hp.rope_attn_factor = 0.87f;
    }
    for (QuantType kv : {QuantType::F32, QuantType::F16, QuantType::Q8_0}) {
      for (bool on_device : {false, true}) {
        SCOPED_TRACE(testing::Message() << (yarn ? "yarn " : "plain ") << name_of(kv) << (on_device ? " device position" : ""));
        const std::vector<float> c = randn(static_cast<size_t>(T) * L, rng, 2.0f);
        const std::vector<float> w = randn(R, rng);
        const std::vector<float> q = randn(static_cast<size_t>(T) * H * QK, rng);

        // CPU: model/attention_mla.cpp's loop.
        std::vector<float> rows(static_cast<size_t>(T) * L), want_nope(static_cast<size_t>(T) * H * nope),
            want_pe(static_cast<size_t>(T) * H * P);
        std::vector<float> cs(P / 2), sn(P / 2);
        for (int t = 0; t < T; ++t) {
          rope_angles(hp, P, pos0 + t, cs.data(), sn.data());
          float* row = &rows[static_cast<size_t>(t) * L];
          std::copy_n(&c[static_cast<size_t>(t) * L], L, row);
          rms_norm(row, w, hp.rms_eps, R, row);
          rope_apply(row + R, 1, P, P, RopeStyle::kNorm, cs.data(), sn.data());
          for (int h = 0; h < H; ++h) {
            const auto first = q.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(t) * H + h) * QK);
            std::vector<float> qh(first, first + QK);
            rope_apply(qh.data() + nope, 1, P, P, RopeStyle::kNorm, cs.data(), sn.data());
            std::copy_n(qh.begin(), nope, &want_nope[(static_cast<size_t>(t) * H + h) * nope]);
            std::copy_n(qh.begin() + nope, P, &want_pe[(static_cast<size_t>(t) * H + h) * P]);
          }
        }
        const HostCache want_cache = make_cache(kv, rows, T, L);

        const uint32_t n_ctx = pos0 + T;
        DeviceBuffer d_c = to_device(c), d_w = to_device(w), d_q = to_device(q);
        DeviceBuffer d_pos = to_device(std::vector<uint32_t>{pos0});
        DeviceBuffer d_nope(want_nope.size() * sizeof(float)), d_pe(want_pe.size() * sizeof(float));
        DeviceBuffer d_cache(want_cache.row_bytes * n_ctx);
        MlaPrepArgs a;
        a.c = d_c.as<float>(), a.c_stride = L, a.kv_norm = d_w.as<float>(), a.eps = hp.rms_eps;
        a.q = d_q.as<float>(), a.q_stride = H * QK;
        a.n_tokens = T, a.n_head = H, a.R = R, a.P = P, a.nope = nope;
        a.rope = mla_rope(hp, P);
        a.pos0 = on_device ? 999u : pos0;  // ignored with pos_dev
        a.pos_dev = on_device ? d_pos.as<uint32_t>() : nullptr;
        a.q_nope = d_nope.as<float>(), a.q_pe = d_pe.as<float>();
        a.cache = d_cache.as<uint8_t>(), a.kv_type = kv, a.row_bytes = want_cache.row_bytes;
        mla_prep(a, nullptr);

        EXPECT_EQ(to_host<float>(d_nope, want_nope.size()), want_nope);
        const std::vector<float> got_pe = to_host<float>(d_pe, want_pe.size());
        for (size_t i = 0; i < want_pe.size(); ++i) {
          ASSERT_NEAR(got_pe[i], want_pe[i], 1e-6f * (1.0f + std::fabs(want_pe[i]))) << "q_pe " << i;
        }
        const std::vector<uint8_t> all = to_host<uint8_t>(d_cache, want_cache.row_bytes * n_ctx);
        std::vector<float> got_rows(rows.size());
        for (int t = 0; t < T; ++t) {
          dequantize_row(kv, &all[(pos0 + t) * want_cache.row_bytes], &got_rows[static_cast<size_t>(t) * L], L);
        }
        // The same floats rounded the same way: equal, but for a norm whose double sum
        // rounds its float mean differently (then one rounding step of the type).
        for (int t = 0; t < T; ++t) {
          float mx = 0;
          for (int e = 0; e < L; ++e) mx = std::max(mx, std::fabs(rows[static_cast<size_t>(t) * L + e]));
          const float step = kv == QuantType::F32 ? 1e-6f * mx : kv == QuantType::F16 ? 1e-3f * mx : mx / 127.0f;
          for (int e = 0; e < L; ++e) {
            const size_t i = static_cast<size_t>(t) * L + e;
            ASSERT_NEAR(got_rows[i], want_cache.values[i], step) << "cache row " << pos0 + t << " dim " << e;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt::cuda
