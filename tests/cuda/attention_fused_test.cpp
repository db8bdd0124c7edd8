// Decode attention's fused launches against the unfused ops they replace: attn_prep =
// add_bias + per-head rms_norm + rope + kv_store, byte for byte (every cache type, both
// RoPE styles, stacked and separate Q/K/V rows, the position from the host or from device
// memory); attention with the prep in its own launch = attn_prep then attention, byte for
// byte; decode attention with the merge fused into the partial launch = the partial and
// combine launches; one chunk merged by its CTA = the same chunk merged by the combine
// launch; the position read on the device with a split sized for a larger capacity = the
// host-position call within float reordering.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cuda/ops.h"
#include "cuda_test_util.h"
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

// A (n_ctx, kv_dim) K and V cache of random rows in `kv`, stored as kv_store stores them,
// and the AttentionArgs of a decode call over it (the position from the host, or from the
// device with the split sized for the whole cache).
struct RandomKvCache {
  QuantType kv;
  int kv_dim;
  uint32_t n_ctx;
  uint64_t rb;
  DeviceBuffer k, v;
  RandomKvCache(QuantType type, int dim, uint32_t ctx, std::mt19937& rng)
      : kv(type), kv_dim(dim), n_ctx(ctx), rb(*row_bytes(type, static_cast<uint64_t>(dim))), k(rb * ctx), v(rb * ctx) {
    for (DeviceBuffer* dst : {&k, &v}) {
      const DeviceBuffer rows = to_device(randn(static_cast<size_t>(ctx) * dim, rng));
      kv_store(kv, rows.as<float>(), static_cast<int>(ctx), dim, dst->as<uint8_t>(), rb, 0, nullptr);
    }
  }
  AttentionArgs decode_args(const float* q, int T, int H, int D, uint32_t pos0, const uint32_t* pos_dev) const {
    AttentionArgs a;
    a.q = q, a.k_cache = k.as<uint8_t>(), a.v_cache = v.as<uint8_t>();
    a.kv_type = kv, a.kv_row_bytes = rb;
    a.n_tokens = T, a.n_head = H, a.n_head_kv = kv_dim / D, a.head_dim = D;
    a.pos0 = pos_dev != nullptr ? 0 : pos0;
    a.pos_dev = pos_dev;
    a.n_kv_cap = pos_dev != nullptr ? n_ctx : 0;
    return a;
  }
};

// Decode attention with the merge fused into the partial launch (decode_counters set)
// against the partial and combine launches, byte for byte: F16 and Q8_0 caches, the
// grouped partial kernel (head_dim 128, GQA 8:1) and the per-head one (head_dim 96), 1
// and 4 tokens over 1..1500 positions, the position from the host or from the device
// (the split sized for the whole cache). One set of counters serves every call and is
// zero after them.
TEST(CudaFused, DecodeAttentionWithTheMergeFusedEqualsTwoLaunches) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(12);
  const uint32_t n_ctx = 1600;
  DeviceBuffer counters = to_device(std::vector<uint32_t>(kAttnDecodeCounters, 0));
  struct Shape {
    int H, Hkv, D;
  };
  for (QuantType kv : {QuantType::F16, QuantType::Q8_0}) {
    for (const Shape& sh : {Shape{32, 4, 128}, Shape{8, 2, 96}}) {
      const RandomKvCache cache(kv, sh.Hkv * sh.D, n_ctx, rng);
      Workspace ws(attention_workspace_bytes(8, sh.H, sh.D, n_ctx) + (1 << 20));
      for (uint32_t n_kv : {1u, 37u, 300u, 1500u}) {
        for (int T : {1, 4}) {
          if (static_cast<uint32_t>(T) > n_kv) continue;
          for (bool device_pos : {false, true}) {
            SCOPED_TRACE(testing::Message() << type_name(kv) << " head_dim " << sh.D << " n_kv " << n_kv << " T " << T
                                            << " device_pos " << device_pos);
            const size_t n = static_cast<size_t>(T) * sh.H * sh.D;
            const std::vector<float> q = randn(n, rng, 1.5f);
            const uint32_t pos0 = n_kv - static_cast<uint32_t>(T);
            DeviceBuffer dq = to_device(q), dpos = to_device(std::vector<uint32_t>{pos0});
            DeviceBuffer o1 = to_device(std::vector<float>(n, 1.0f)), o2 = to_device(std::vector<float>(n, 2.0f));
            AttentionArgs a = cache.decode_args(dq.as<float>(), T, sh.H, sh.D, pos0, device_pos ? dpos.as<uint32_t>() : nullptr);
            a.out = o1.as<float>();
            ws.reset();
            attention(a, ws, nullptr);
            a.out = o2.as<float>();
            a.decode_counters = counters.as<uint32_t>();
            ws.reset();
            attention(a, ws, nullptr);
            EXPECT_TRUE(same_bytes(to_host<float>(o1, n), to_host<float>(o2, n)));
          }
        }
      }
    }
  }
  const std::vector<uint32_t> zeros(kAttnDecodeCounters, 0);
  EXPECT_TRUE(same_bytes(to_host<uint32_t>(counters, zeros.size()), zeros)) << "the counters are left zero";
}

// single_chunk_max: a short context in one chunk per head group. Merged by its own CTA
// (decode_counters) it must be the bytes of the same one chunk merged by the combine
// launch, and close to the default split (other chunking, other rounding).
TEST(CudaFused, DecodeAttentionInOneChunkEqualsItsTwoLaunchesAndMatchesTheSplit) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(14);
  const uint32_t n_ctx = 256;
  DeviceBuffer counters = to_device(std::vector<uint32_t>(kAttnDecodeCounters, 0));
  for (QuantType kv : {QuantType::F16, QuantType::Q8_0}) {
    const int H = 32, Hkv = 4, D = 128;
    const RandomKvCache cache(kv, Hkv * D, n_ctx, rng);
    Workspace ws(attention_workspace_bytes(8, H, D, n_ctx) + (1 << 20));
    for (uint32_t n_kv : {1u, 37u, 200u, 256u}) {
      for (bool device_pos : {false, true}) {
        SCOPED_TRACE(testing::Message() << type_name(kv) << " n_kv " << n_kv << " device_pos " << device_pos);
        const size_t n = static_cast<size_t>(H) * D;
        const std::vector<float> q = randn(n, rng, 1.5f);
        const uint32_t pos0 = n_kv - 1;
        DeviceBuffer dq = to_device(q), dpos = to_device(std::vector<uint32_t>{pos0});
        std::vector<std::vector<float>> out;
        for (int variant = 0; variant < 3; ++variant) {  // split; one chunk + combine; one chunk merged inside
          DeviceBuffer o = to_device(std::vector<float>(n, -7.0f));
          AttentionArgs a = cache.decode_args(dq.as<float>(), 1, H, D, pos0, device_pos ? dpos.as<uint32_t>() : nullptr);
          a.out = o.as<float>();
          a.single_chunk_max = variant > 0 ? 256 : 0;
          a.decode_counters = variant == 2 ? counters.as<uint32_t>() : nullptr;
          ws.reset();
          attention(a, ws, nullptr);
          out.push_back(to_host<float>(o, n));
        }
        EXPECT_TRUE(same_bytes(out[1], out[2]));
        float worst = 0.f, largest = 0.f;
        for (size_t i = 0; i < n; ++i) {
          worst = std::max(worst, std::fabs(out[0][i] - out[2][i]));
          largest = std::max(largest, std::fabs(out[0][i]));
        }
        EXPECT_GT(largest, 0.f);
        EXPECT_LE(worst, 1e-5f * std::max(1.f, largest)) << "one chunk vs the split";
      }
    }
  }
  const std::vector<uint32_t> zeros(kAttnDecodeCounters, 0);
  EXPECT_TRUE(same_bytes(to_host<uint32_t>(counters, zeros.size()), zeros)) << "the counters are left zero";
}

struct PrepCase {
  QuantType kv;
  bool neox, bias, norm, stacked, device_pos;
  int n_rot, T;
};

TEST(CudaFused, AttnPrepEqualsBiasNormRopeStore) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  const int H = 8, Hkv = 2, D = 128, n_ctx = 64;
  const int Q = H * D, KV = Hkv * D;
  const float eps = 1e-6f, base = 1e6f, fscale = 1.0f;
  std::vector<PrepCase> cases;
  for (QuantType kv : {QuantType::F16, QuantType::F32, QuantType::Q8_0}) {
    cases.push_back({kv, true, false, true, true, false, D, 1});
    cases.push_back({kv, true, false, true, true, true, D, 1});
    cases.push_back({kv, false, true, false, false, false, D, 5});
    cases.push_back({kv, true, true, true, false, true, 64, 3});
  }
  for (const PrepCase& c : cases) {
    SCOPED_TRACE(testing::Message() << type_name(c.kv) << " neox " << c.neox << " bias " << c.bias << " norm " << c.norm
                                    << " stacked " << c.stacked << " device_pos " << c.device_pos << " n_rot "
                                    << c.n_rot << " T " << c.T);
    const int T = c.T;
    const uint32_t pos0 = 37;
    const std::vector<float> qkv = randn(static_cast<size_t>(T) * (Q + 2 * KV), rng, 2.0f);
    const std::vector<float> bq = randn(Q, rng), bk = randn(KV, rng), bv = randn(KV, rng);
    const std::vector<float> qn = randn(D, rng), kn = randn(D, rng);
    const uint64_t rb = *row_bytes(c.kv, KV);
    // Unfused: split rows, bias, per-head norm, rope, store.
    std::vector<float> q(static_cast<size_t>(T) * Q), k(static_cast<size_t>(T) * KV), v(k.size());
    for (int t = 0; t < T; ++t) {
      const float* r = &qkv[static_cast<size_t>(t) * (Q + 2 * KV)];
      std::copy(r, r + Q, &q[static_cast<size_t>(t) * Q]);
      std::copy(r + Q, r + Q + KV, &k[static_cast<size_t>(t) * KV]);
      std::copy(r + Q + KV, r + Q + 2 * KV, &v[static_cast<size_t>(t) * KV]);
    }
    DeviceBuffer dq = to_device(q), dk = to_device(k), dv = to_device(v);
    DeviceBuffer dbq = to_device(bq), dbk = to_device(bk), dbv = to_device(bv), dqn = to_device(qn), dkn = to_device(kn);
    std::vector<uint8_t> zeros(rb * n_ctx, 0);
    DeviceBuffer kc1 = to_device(zeros), vc1 = to_device(zeros), kc2 = to_device(zeros), vc2 = to_device(zeros);
    if (c.bias) {
      add_bias(dq.as<float>(), dbq.as<float>(), T, Q, nullptr);
      add_bias(dk.as<float>(), dbk.as<float>(), T, KV, nullptr);
      add_bias(dv.as<float>(), dbv.as<float>(), T, KV, nullptr);
    }
    if (c.norm) {
      rms_norm(dq.as<float>(), D, dqn.as<float>(), eps, T * H, D, dq.as<float>(), D, nullptr);
      rms_norm(dk.as<float>(), D, dkn.as<float>(), eps, T * Hkv, D, dk.as<float>(), D, nullptr);
    }
    rope(dq.as<float>(), T, H, D, c.n_rot, pos0, base, fscale, c.neox, nullptr);
    rope(dk.as<float>(), T, Hkv, D, c.n_rot, pos0, base, fscale, c.neox, nullptr);
    kv_store(c.kv, dk.as<float>(), T, KV, kc1.as<uint8_t>(), rb, pos0, nullptr);
    kv_store(c.kv, dv.as<float>(), T, KV, vc1.as<uint8_t>(), rb, pos0, nullptr);

    // Fused.
    DeviceBuffer dqkv = to_device(qkv), dq2(q.size() * sizeof(float));
    const std::vector<uint32_t> pos_word{pos0};
    DeviceBuffer dpos = to_device(pos_word);
    DeviceBuffer sq = to_device(q), sk = to_device(k), sv = to_device(v);  // separate rows
    AttnPrepArgs a;
    if (c.stacked) {
      a.q_src = dqkv.as<float>(), a.k_src = dqkv.as<float>() + Q, a.v_src = dqkv.as<float>() + Q + KV;
      a.q_stride = a.k_stride = a.v_stride = Q + 2 * KV;
    } else {
      a.q_src = sq.as<float>(), a.k_src = sk.as<float>(), a.v_src = sv.as<float>();
      a.q_stride = Q, a.k_stride = a.v_stride = KV;
    }
    if (c.bias) a.bq = dbq.as<float>(), a.bk = dbk.as<float>(), a.bv = dbv.as<float>();
    if (c.norm) a.q_norm = dqn.as<float>(), a.k_norm = dkn.as<float>();
    a.eps = eps;
    a.n_tokens = T, a.n_head = H, a.n_head_kv = Hkv, a.head_dim = D, a.n_rot = c.n_rot;
    a.freq_base = base, a.freq_scale = fscale, a.neox = c.neox;
    a.pos0 = c.device_pos ? 0 : pos0;
    a.pos_dev = c.device_pos ? dpos.as<uint32_t>() : nullptr;
    a.q_out = dq2.as<float>();
    a.k_cache = kc2.as<uint8_t>(), a.v_cache = vc2.as<uint8_t>();
    a.kv_type = c.kv, a.row_bytes = rb;
    attn_prep(a, nullptr);
    EXPECT_TRUE(same_bytes(to_host<float>(dq, q.size()), to_host<float>(dq2, q.size()))) << "q";
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(kc1, zeros.size()), to_host<uint8_t>(kc2, zeros.size()))) << "k cache";
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(vc1, zeros.size()), to_host<uint8_t>(vc2, zeros.size()))) << "v cache";
  }
}

TEST(CudaFused, DecodeAttentionWithTheDevicePositionMatchesTheHostPosition) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(9);
  const int H = 32, Hkv = 4, D = 128, n_ctx = 1024;
  const int KV = Hkv * D;
  const uint64_t rb = *row_bytes(QuantType::F16, KV);
  const std::vector<float> rows = randn(static_cast<size_t>(n_ctx) * KV, rng);
  DeviceBuffer dr = to_device(rows);
  DeviceBuffer kc(rb * n_ctx), vc(rb * n_ctx);
  kv_store(QuantType::F16, dr.as<float>(), n_ctx, KV, kc.as<uint8_t>(), rb, 0, nullptr);
  kv_store(QuantType::F16, dr.as<float>(), n_ctx, KV, vc.as<uint8_t>(), rb, 0, nullptr);
  Workspace ws(attention_workspace_bytes(1, H, D, n_ctx) + (1 << 20));
  for (uint32_t pos : {0u, 5u, 255u, 300u, 1023u}) {
    for (uint32_t cap : {256u, 512u, 1024u}) {
      if (pos + 1 > cap) continue;
      const std::vector<float> q = randn(static_cast<size_t>(H) * D, rng);
      DeviceBuffer dq = to_device(q), o1(q.size() * sizeof(float)), o2(q.size() * sizeof(float));
      const std::vector<uint32_t> pw{pos};
      DeviceBuffer dpos = to_device(pw);
      AttentionArgs a;
      a.q = dq.as<float>(), a.k_cache = kc.as<uint8_t>(), a.v_cache = vc.as<uint8_t>();
      a.kv_type = QuantType::F16, a.kv_row_bytes = rb;
      a.n_tokens = 1, a.n_head = H, a.n_head_kv = Hkv, a.head_dim = D, a.pos0 = pos;
      a.out = o1.as<float>();
      ws.reset();
      attention(a, ws, nullptr);
      const std::vector<float> want = to_host<float>(o1, q.size());
      a.pos0 = 0, a.pos_dev = dpos.as<uint32_t>(), a.n_kv_cap = cap, a.out = o2.as<float>();
      ws.reset();
      attention(a, ws, nullptr);
      const std::vector<float> got = to_host<float>(o2, q.size());
      float scale = 0, diff = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        diff = std::max(diff, std::fabs(want[i] - got[i]));
      }
      EXPECT_LE(diff, 1e-5f * scale) << "pos " << pos << " cap " << cap;
    }
  }
}

// attention() with AttentionArgs::prep (the warps kernel's CTAs prep their heads and the
// new rows in the same launch; attn_prep's launch first where it cannot) = attn_prep then
// attention(), byte for byte: the output, the quantized output rows and both caches
// (every cache type, head_dim 64 / 128 / 256 (256: attn_prep's own launch), both RoPE
// styles and a partial rotation, biases and norms, one chunk and several, the position from
// the host or from device memory, plain and lanes forms, GQA 1 to 8, a decode batch of 3).
struct InLaunchPrepCase {
  QuantType kv;
  int D, H, Hkv, n_rot, T;
  bool neox, bias_norm, device_pos, lanes;
  uint32_t pos;
};
TEST(CudaFused, AttentionWithThePrepInItsLaunchEqualsAttnPrepThenAttention) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(21);
  std::vector<InLaunchPrepCase> cases;
  for (QuantType kv : {QuantType::F16, QuantType::Q8_0, QuantType::F32}) {
    for (int D : {64, 128, 256}) {
      for (uint32_t pos : {0u, 37u, 255u, 700u}) {
        cases.push_back({kv, D, 8, 2, D, 1, true, true, false, true, pos});
      }
      cases.push_back({kv, D, 8, 8, D / 2, 1, false, false, true, false, 100});
    }
  }
  cases.push_back({QuantType::F16, 128, 32, 4, 128, 1, true, true, true, true, 1500});  // chunks of 256
  cases.push_back({QuantType::F16, 128, 8, 1, 64, 1, true, true, false, false, 31});    // MQA
  cases.push_back({QuantType::F16, 128, 8, 2, 128, 3, true, true, false, true, 40});    // 3 tokens: attn_prep's launch
  const int n_ctx = 2048;
  for (const InLaunchPrepCase& c : cases) {
    SCOPED_TRACE(testing::Message() << type_name(c.kv) << " D " << c.D << " heads " << c.H << "/" << c.Hkv << " n_rot "
                                    << c.n_rot << " T " << c.T << " neox " << c.neox << " bias+norm " << c.bias_norm
                                    << " device_pos " << c.device_pos << " lanes " << c.lanes << " pos " << c.pos);
    const int D = c.D, H = c.H, Hkv = c.Hkv, T = c.T, Q = H * D, KV = Hkv * D;
    const uint64_t rb = *row_bytes(c.kv, KV);
    // The cache's past rows, then the step's [q | k | v] rows and the prep's weights.
    const std::vector<float> past = randn(static_cast<size_t>(c.pos) * KV + 1, rng);
    DeviceBuffer dpast = to_device(past);
    std::vector<uint8_t> fill(rb * n_ctx, 0x3C);
    DeviceBuffer k1 = to_device(fill), v1 = to_device(fill);
    if (c.pos > 0) {
      kv_store(c.kv, dpast.as<float>(), static_cast<int>(c.pos), KV, k1.as<uint8_t>(), rb, 0, nullptr);
      kv_store(c.kv, dpast.as<float>(), static_cast<int>(c.pos), KV, v1.as<uint8_t>(), rb, 0, nullptr);
    }
    const std::vector<uint8_t> start_k = to_host<uint8_t>(k1, fill.size()), start_v = to_host<uint8_t>(v1, fill.size());
    DeviceBuffer k2 = to_device(start_k), v2 = to_device(start_v);
    const std::vector<float> qkv = randn(static_cast<size_t>(T) * (Q + 2 * KV), rng, 2.0f);
    const std::vector<float> bq = randn(Q, rng), bk = randn(KV, rng), bv = randn(KV, rng);
    const std::vector<float> qn = randn(D, rng), kn = randn(D, rng);
    DeviceBuffer dqkv = to_device(qkv), dbq = to_device(bq), dbk = to_device(bk), dbv = to_device(bv);
    DeviceBuffer dqn = to_device(qn), dkn = to_device(kn), dq(sizeof(float) * T * Q);
    const std::vector<uint32_t> pw{c.pos};
    DeviceBuffer dpos = to_device(pw);
    AttnPrepArgs pa;
    pa.q_src = dqkv.as<float>(), pa.k_src = dqkv.as<float>() + Q, pa.v_src = dqkv.as<float>() + Q + KV;
    pa.q_stride = pa.k_stride = pa.v_stride = Q + 2 * KV;
    if (c.bias_norm) {
      pa.bq = dbq.as<float>(), pa.bk = dbk.as<float>(), pa.bv = dbv.as<float>();
      pa.q_norm = dqn.as<float>(), pa.k_norm = dkn.as<float>();
    }
    pa.n_tokens = T, pa.n_head = H, pa.n_head_kv = Hkv, pa.head_dim = D, pa.n_rot = c.n_rot;
    pa.freq_base = 1e6f, pa.neox = c.neox;
    pa.pos0 = c.device_pos ? 0 : c.pos;
    pa.pos_dev = c.device_pos ? dpos.as<uint32_t>() : nullptr;
    pa.q_out = dq.as<float>();
    pa.kv_type = c.kv, pa.row_bytes = rb;
    AttentionArgs a;
    a.q = dq.as<float>();
    a.kv_type = c.kv, a.kv_row_bytes = rb;
    a.n_tokens = T, a.n_head = H, a.n_head_kv = Hkv, a.head_dim = D;
    a.pos0 = pa.pos0, a.pos_dev = pa.pos_dev, a.n_kv_cap = c.device_pos ? 2048 : 0;
    a.warp_max = 4096, a.warp_lanes = c.lanes;
    const size_t rq = static_cast<size_t>(T) * Q;
    DeviceBuffer counters(sizeof(uint32_t) * kAttnDecodeCounters);
    MT_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    a.quant_mode = ActQuant::kQ8_K, a.quant_counters = counters.as<uint32_t>();
    Workspace ws(attention_workspace_bytes(T, H, D, n_ctx));
    std::vector<float> out[2];
    std::vector<int8_t> qs[2];
    bool quantized[2];
    for (int fused = 0; fused < 2; ++fused) {
      DeviceBuffer o(sizeof(float) * rq), oq(rq), om(rq / 32 * sizeof(uint2));
      pa.k_cache = (fused ? k2 : k1).as<uint8_t>(), pa.v_cache = (fused ? v2 : v1).as<uint8_t>();
      a.k_cache = pa.k_cache, a.v_cache = pa.v_cache, a.out = o.as<float>();
      a.quant_qs = oq.as<int8_t>(), a.quant_meta = om.as<uint2>();
      ws.reset();
      if (fused) {
        a.prep = &pa;
      } else {
        a.prep = nullptr;
        attn_prep(pa, nullptr);
      }
      quantized[fused] = attention(a, ws, nullptr);
      MT_CUDA_CHECK(cudaDeviceSynchronize());
      out[fused] = to_host<float>(o, rq);
      qs[fused] = to_host<int8_t>(oq, rq);
    }
    EXPECT_TRUE(same_bytes(out[0], out[1])) << "output";
    EXPECT_EQ(quantized[0], quantized[1]);
    if (quantized[0]) {
      EXPECT_TRUE(same_bytes(qs[0], qs[1])) << "quantized output";
    }
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(k1, fill.size()), to_host<uint8_t>(k2, fill.size()))) << "k cache";
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(v1, fill.size()), to_host<uint8_t>(v2, fill.size()))) << "v cache";
    EXPECT_FALSE(same_bytes(to_host<uint8_t>(k2, fill.size()), start_k)) << "the new rows stored";
  }
}

}  // namespace
}  // namespace mt::cuda
